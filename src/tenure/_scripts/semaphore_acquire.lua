-- semaphore_acquire.lua: take n permits of a semaphore for one lease, or queue
-- the caller so that a release hands the permits straight to it (see
-- _semaphore.lua, sem_promote). Expired permits are dropped first, and free
-- permits go to the queue's first waiters before anyone else: a caller that is
-- not queued gets permits only while nobody waits.
--
-- KEYS[1]  holders key   sorted set, a member "<token>#<i>" per held permit,
--                        score = expiry (server ms) (see _semaphore.lua)
-- KEYS[2]  permits key   string holding an integer: the permit count
-- KEYS[3]  fence key     string holding an integer: the last fence minted
-- KEYS[4]  waiters key   sorted set of waiters (see _semaphore.lua)
-- ARGV[1]  token         string; the acquiring lease's token
-- ARGV[2]  n             integer >= 1; the permits asked for
-- ARGV[3]  lease         integer MILLISECONDS, > 0
-- ARGV[4]  permits       integer >= 1; the caller's permit count, stored if none is
-- ARGV[5]  check         "1": refuse if another count is stored; "0": use the stored one
-- ARGV[6]  member        the caller's waiters member, or "" to not queue
-- ARGV[7]  wake prefix   string; waiter w is told by PUBLISH on ARGV[7] .. w
-- ARGV[8]  fence ttl     integer MILLISECONDS the fence key outlives its last use
--                        (at least the lease)
-- ARGV[9]  permits ttl   integer MILLISECONDS the permits key outlives its last use
--                        (at least the lease)
--
-- Returns  fence          OK: the token holds n permits until ARGV[3] ms from now.
--                          fence = last fence + 1, or the server's TIME in µs when
--                          no fence is stored. A token that holds its permits
--                          already (handed to it by a release whose message it
--                          has not seen) has its lease reset and a new fence.
--          {2, wait_ms}    BUSY: too few free permits, or others queue first;
--                          wait_ms = time until the first lease ends, -1 when no
--                          permit is held. ARGV[6], if given, is queued.
--          {7, stored}     PERMITS_DIFFER: ARGV[5] is "1" and another count is
--                          stored; nothing written.
--          {8, total}      TOO_MANY: n is more than the permit count in force;
--                          only ARGV[6] was removed.
--          {5, key}        WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua
--@include _permits.lua

-- The uncontended path: an attempt that does not queue (ARGV[6] = ""), by a
-- token that holds no permits, while nobody is queued, no lease has ended
-- (nothing to drop) and n permits are free. Its reply is the one the general
-- path below would give; any other case (or a key of another type) writes
-- nothing and goes on (`break`) to the general path, which decides. It reads
-- the clock once (the lease's deadline and the fence), and checks with the
-- ACL guard only the commands it may run after its first write. It calls no
-- helper but tonumber (the fence rule's steps are written out) and, for a
-- lease of more than one permit, _permits.lua's: each Lua call costs the
-- server about 0.1-0.4 µs (a C one such as tonumber or math.floor too; the
-- arithmetic here is the VM's own), and a script's chunk makes every
-- function it defines at every call (the others are defined below:
-- tenure._scripts.deferred).
if ARGV[6] == '' then repeat
  local token, asked, lease = ARGV[1], ARGV[2] + 0, ARGV[3] + 0
  local held = 0
  if redis.pcall('EXISTS', KEYS[1], KEYS[4]) ~= 0 then  -- (nothing held, nobody queued: one read)
    if redis.pcall('ZCARD', KEYS[4]) ~= 0 then break end
    held = redis.pcall('ZCARD', KEYS[1])
    if type(held) ~= 'number' then break end
  end
  -- The permit count and the last fence in one read. MGET reads a key of
  -- another type as missing: a missing one is confirmed by EXISTS.
  local both = redis.pcall('MGET', KEYS[2], KEYS[3])
  if both.err then break end
  local stored, last = both[1], both[2]
  if not (stored and last)
      and redis.pcall('EXISTS', KEYS[2], KEYS[3]) ~= (stored and 1 or 0) + (last and 1 or 0) then
    break
  end
--@include _fence_last.lua
  local lastn = n
  -- (the permit count: stored_fence's rule too)
  local total = stored and tonumber(stored)
  if stored and not (total and total % 1 == 0 and total > -9007199254740992
      and total < 9007199254740992) then break end
  if total and ARGV[5] == '1' and total ~= ARGV[4] + 0 then break end  -- (PERMITS_DIFFER)
  total = total or ARGV[4] + 0
  if held + asked > total then break end  -- too few free, unless leases ended (or TOO_MANY)
  local time = redis.call('TIME')
  local us = time[1] * 1000000 + time[2]
  local now = (us - us % 1000) / 1000
  local latest = now + lease  -- when the last lease ends, this one counted
  if held > 0 then
    if redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2] + 0 <= now then break end
    if redis.call('ZSCORE', KEYS[1], token .. '#1') then break end
    local last_end = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2] + 0
    if last_end > latest then latest = last_end end
  end
  -- The first write is the permit count's: PEXPIRE when the caller's count
  -- is stored (as the caller writes it: its value stays), else SET. What
  -- runs after it is checked now (ZADD, and the other of SET and PEXPIRE).
  local renew = stored == ARGV[4]
  local check = redis.acl_check_cmd
  if check then
    local other = renew and 'SET' or 'PEXPIRE'
    local refused = (not check('ZADD', KEYS[1]) and 'ZADD') or (not check(other, KEYS[1]) and other)
    if refused then return {DENIED, {'command', refused}} end
  end
  local keep = ARGV[9] + 0
  if keep < lease then keep = lease end
  if renew then
    redis.call('PEXPIRE', KEYS[2], keep)
  else
    redis.call('SET', KEYS[2], total, 'PX', keep)
  end
  if asked == 1 then
    redis.call('ZADD', KEYS[1], now + lease, token .. '#1')
  else
    sem_set_lease(token, asked, now + lease, false)
  end
  local fence = us  -- (next_fence_at's rule)
  if lastn and lastn >= us then fence = lastn + 1 end
  keep = ARGV[8] + 0
  if keep < lease then keep = lease end
  redis.call('SET', KEYS[3], fence, 'PX', keep)  -- (an integer below 2^53: exact)
  redis.call('PEXPIRE', KEYS[1], latest - now)
  return fence
until true end

--@later
--@include _semaphore.lua

-- A caller that queues itself must be one a release can tell: its own channel too.
local own = ARGV[6] ~= '' and (ARGV[7] .. string.match(ARGV[6], '^([^|]*)')) or nil
local denied = acl_denied(own, KEYS[4], ARGV[7])
if denied then return {DENIED, denied} end

local bad = sem_wrong_key()
if bad then return {WRONG_TYPE, bad} end
local token, n, lease, member = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[6]
local fence_ttl = math.max(tonumber(ARGV[8]), lease)
local s = sem_open(ARGV[4])
if s.stored and ARGV[5] == '1' and s.stored ~= tonumber(ARGV[4]) then return {PERMITS_DIFFER, s.stored} end
if n > s.total then
  if member ~= '' then redis.call('ZREM', KEYS[4], member) end
  return {TOO_MANY, s.total}
end
redis.call('SET', KEYS[2], s.total, 'PX', string.format('%.0f', math.max(tonumber(ARGV[9]), lease)))
sem_prune(s)

local granted = nil
if sem_holds(s, token) then
  if member ~= '' then redis.call('ZREM', KEYS[4], member) end
  sem_set_lease(token, n, s.now_ms + lease, true)
  granted = sem_keep_fence(s, sem_next_fence(s), fence_ttl)
  sem_promote(s, ARGV[7], tonumber(ARGV[8]), '')
else
  if member ~= '' then redis.call('ZADD', KEYS[4], 'NX', s.now_us, member) end
  granted = sem_promote(s, ARGV[7], tonumber(ARGV[8]), member, lease)
  if not granted and member == '' and redis.call('ZCARD', KEYS[4]) == 0
      and s.total - redis.call('ZCARD', KEYS[1]) >= n then
    sem_set_lease(token, n, s.now_ms + lease, false)
    granted = sem_keep_fence(s, sem_next_fence(s), fence_ttl)
  end
end
sem_touch(s)
if granted then return tonumber(granted) end

local wait = sem_next_expiry(s)
if member ~= '' then redis.call('PEXPIRE', KEYS[4], math.max(wait, 0) + 60000) end
return {BUSY, wait}
