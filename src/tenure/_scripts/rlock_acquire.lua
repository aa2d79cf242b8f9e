-- rlock_acquire.lua: take a reentrant lock for an owner, enter it again, or
-- claim a hold that a release handed to the caller; when another owner holds
-- it, queue the caller so that a release hands the lock straight to it (see
-- rlock_release.lua).
--
-- KEYS[1]  lock key      hash with one field: the holder's owner id (then ';'
--                        and its label, when it has one), value = its hold
--                        count (integer >= 1); the key's PX is the lease
-- KEYS[2]  fence key     string holding an integer: the last fence minted for the name
-- KEYS[3]  waiters key   sorted set, score = arrival (server µs), member =
--                        "<waiter id>|<claim ms>|<owner id>" (claim ms: the
--                        lease a hand-off to it sets, see _common.lua)
-- ARGV[1]  owner         string; the caller's owner id, then ';' and its label
--                        (the field a new hold gets; an owner's hold is found
--                        by its owner id, whatever label it was taken with)
-- ARGV[2]  lease         integer MILLISECONDS, > 0
-- ARGV[3]  member        the caller's waiters member (as KEYS[3]), or "" when not queued
-- KEYS[4]  delay key     string: the lock-delay guard, value = the holding owner
--                        as the caller named it (ARGV[1]); it outlives the hold's
--                        lease by the lock-delay, and a release at count 0
--                        deletes it (see lock_acquire.lua)
-- KEYS[5]  last op key   string "<owner>|<op id>" (the owner as ARGV[1] names it:
--                        a retry, or an undo, of a call names it the same): the
--                        last change of the count (120 s), so that a call
--                        retried after a lost reply is recognised and not
--                        applied twice
-- ARGV[4]  fence ttl     integer MILLISECONDS the fence key outlives its last use
--                        (at least the lease)
-- ARGV[5]  lock-delay    integer MILLISECONDS, >= 0; 0 = no lock-delay
-- ARGV[6]  op id         string, unique per acquire call
-- ARGV[7]  wake prefix   string; waiter w is told by PUBLISH on ARGV[7] .. w (the
--                        caller's own channel is checked before it queues)
--
-- Returns  fence          OK: the caller holds the lock, and its lease now ends
--                         ARGV[2] ms from now.
--                         - The lock was free: a new hold with count 1 and a new
--                           fence = the larger of the last fence + 1 and the
--                           server's TIME in µs (it increases across a restart).
--                         - The caller already holds it and is not queued: count + 1;
--                           fence = the hold's fence (the same as its first acquire).
--                         - The caller already holds it and is queued (ARGV[3] ~= ""):
--                           a release handed the hold to it; count unchanged (1).
--                         - ARGV[6] is the last op and the caller holds it: a
--                           retry of a call that was applied; nothing changes.
--          {2, pttl_ms}   BUSY: another owner holds it (or a dead holder's
--                         lock-delay runs); pttl_ms = how long that lasts, -1
--                         when it has no expiry. ARGV[3], if given, is queued.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua

-- A first hold that does not queue, while the lock is free and no lock-delay
-- key exists, first, and written out here with no helper (as
-- lock_acquire.lua's uncontended attempt): the helpers of _acl.lua and
-- _common.lua (put above) are defined below, at the `later` line (see
-- tenure._scripts.deferred). It reads first (the two keys, the fence key,
-- the clock: a refusal there writes nothing); its first write is the
-- fence's SET, after which it runs only HSET, PEXPIRE and SET: those are
-- checked first (as acl_need does). Its reply and writes are the whole
-- script's for that case. Redis 6.2, which can't check them, and anything
-- else (the lock held, a lock-delay key, a fence key holding no number) go
-- on to the whole script, which says so.
local check = redis.acl_check_cmd
if ARGV[3] == '' and check and redis.pcall('EXISTS', KEYS[1], KEYS[4]) == 0
    and check('HSET', KEYS[1]) and check('PEXPIRE', KEYS[1]) then repeat
  local last = redis.pcall('GET', KEYS[2])
--@include _fence_last.lua
--@include _fence_now.lua
  local lease, keep = ARGV[2] + 0, ARGV[4] + 0
  redis.call('SET', KEYS[2], fence, 'PX', keep > lease and keep or lease)
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[5] + 0 > 0 then redis.call('SET', KEYS[4], ARGV[1], 'PX', lease + ARGV[5]) end
  redis.call('SET', KEYS[5], ARGV[1] .. '|' .. ARGV[6], 'PX', 120000)
  return fence
until true end

--@later
--@include _acl.lua

-- A caller that queues itself must be one a release can tell: its own wake
-- channel (the member's waiter id after the wake prefix 7) is checked too.
local own = nil
if ARGV[3] ~= '' and ARGV[7] then own = ARGV[7] .. string.match(ARGV[3], '^([^|]*)') end
local kind = redis.call('TYPE', KEYS[1]).ok  -- (a read: a refusal writes nothing)
local denied
if ARGV[3] == '' and kind == 'none' then
  -- A first hold that does not queue writes first the fence's SET; after it,
  -- it may only run HSET, PEXPIRE and SET: those are checked now, and
  -- nothing else it could never run on this path.
  denied = acl_need({'HSET', 'PEXPIRE'})
else
  denied = acl_commands() or acl_channels(own, nil, ARGV[7] or '')
end
if denied then return {DENIED, denied} end

if kind ~= 'none' and kind ~= 'hash' then return {WRONG_TYPE, KEYS[1]} end
local last = redis.pcall('GET', KEYS[2])
if wrong(last) or (last and not stored_fence(last)) then return {WRONG_TYPE, KEYS[2]} end
if ARGV[3] ~= '' then
  if other_type(KEYS[3], 'zset') then return {WRONG_TYPE, KEYS[3]} end
end
local fence_ttl = math.max(tonumber(ARGV[4]), tonumber(ARGV[2]))
local delay = tonumber(ARGV[5])
local op = ARGV[1] .. '|' .. ARGV[6]

local function busy(pttl)
  if ARGV[3] ~= '' then
    redis.call('ZADD', KEYS[3], 'NX', now_us(), ARGV[3])
    redis.call('PEXPIRE', KEYS[3], math.max(pttl, 0) + 60000)
  end
  return {BUSY, pttl}
end

-- the lease is set: guard it with the lock-delay, and note the op
local function held()
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  delay_after(KEYS[4], ARGV[1], ARGV[2], delay)
  redis.call('SET', KEYS[5], op, 'PX', 120000)
end

local function mint()
  local fence = next_fence(last)
  redis.call('SET', KEYS[2], fence, 'PX', fence_ttl)  -- (an integer below 2^53: exact)
  return fence
end

if kind == 'none' then
  local delayed = redis.call('PTTL', KEYS[4])
  if delayed > 0 then return busy(delayed) end
  -- Redis 6.2 checks no command up front: the lease's PEXPIRE runs first, on
  -- the missing key (it writes nothing), so that a refusal leaves no hold
  -- without expiry
  if not redis.acl_check_cmd then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
  local fence = mint()
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  held()
  if ARGV[3] ~= '' then redis.call('ZREM', KEYS[3], ARGV[3]) end
  return fence
end

local field = holder_field(KEYS[1], ARGV[1])
if field then
  if ARGV[3] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[3])
  elseif ARGV[6] == '' or redis.call('GET', KEYS[5]) ~= op then
    redis.call('HINCRBY', KEYS[1], field, 1)
  end
  held()
  -- the fence key deleted, or set below 0 by hand (a bare negative reply is
  -- BUSY): seed anew
  if not last or tonumber(last) < 0 then return mint() end
  redis.call('PEXPIRE', KEYS[2], fence_ttl)
  return tonumber(last)
end

return busy(redis.call('PTTL', KEYS[1]))
