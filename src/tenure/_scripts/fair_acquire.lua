-- fair_acquire.lua: take a fair lock, or queue the caller in arrival order so
-- that a release hands the lock to the first waiter (see fair_release.lua).
-- The lock is granted only to the head of the queue: a caller is let in when
-- the lock is free and nobody is queued ahead of it, whether it queues or not.
-- Waiters whose deadline (server time) has passed are dropped first: a waiter
-- that died cannot block the queue for longer than its waiter timeout.
--
-- KEYS[1]  lock key       string; value = the holder's owner token
-- KEYS[2]  fence key      string holding an integer: the last fence minted for the name
-- KEYS[3]  waiters key    sorted set, the queue: score = arrival (server µs,
--                         strictly increasing), member = "<waiter id>|<claim ms>|<token>"
--                         (claim ms: the lease a hand-off to it sets, see
--                         _common.lua)
-- KEYS[4]  deadlines key  sorted set, the same members: score = when the member is
--                         dropped unless it calls again (server time, ms)
-- KEYS[5]  delay key      string: the lock-delay guard (see lock_acquire.lua)
-- ARGV[1]  token          string; the acquiring lease's owner token
-- ARGV[2]  owner prefix   string; a holder token that starts with it belongs to the caller
-- ARGV[3]  lease          integer MILLISECONDS, > 0
-- ARGV[4]  member         the caller's member (as KEYS[3]), or "" to not queue
-- ARGV[5]  fence ttl      integer MILLISECONDS the fence key outlives its last use
-- ARGV[6]  lock-delay     integer MILLISECONDS, >= 0; 0 = no lock-delay for this hold
-- ARGV[7]  waiter timeout integer MILLISECONDS, > 0: a queued member's deadline is
--                         set to the server's TIME + this at every call
-- ARGV[8]  wake prefix    string; waiter w is told by PUBLISH on ARGV[8] .. w (the
--                         caller's own channel is checked before it queues)
--
-- Returns  fence          OK: acquired. fence = the larger of the last fence + 1
--                         and the server's TIME in µs. A call whose token already
--                         holds the lock (a retry after a lost reply, or a
--                         hand-off whose message was lost) gets its fence again,
--                         and its lease (and lock-delay guard) is reset to
--                         ARGV[3] ms from now.
--                         The caller's member, if any, has left the queue.
--          {2, wait_ms}   BUSY: another owner holds it (wait_ms = its pttl, -1
--                         when it has no expiry), or its lock-delay runs (wait_ms
--                         = what is left of it), or it is free but a waiter is
--                         ahead of the caller (wait_ms = until that waiter's
--                         deadline). ARGV[4], if given, is queued (at the back if
--                         it was not queued) with a new deadline.
--          {3, pttl_ms}   OWNED_BY_CALLER: the caller's owner already holds it.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua

-- The uncontended attempt (it does not queue, nobody is queued, no deadline
-- is kept, no lock-delay key exists), first, and written out here with no
-- helper, as lock_acquire.lua's: the helpers of _acl.lua and _common.lua
-- (put above) are defined below, at the `later` line (see
-- tenure._scripts.deferred). It reads first (the three keys, the fence key,
-- the clock: a refusal there writes nothing); its first write is the SET
-- NX, after which it runs only SET. Its reply is the one the whole script
-- would give: free, nobody ahead. Anything else (the lock busy or the
-- caller's, a refusal, a fence key holding no number) goes on to the whole
-- script, which says so.
if ARGV[4] == '' and redis.pcall('EXISTS', KEYS[3], KEYS[4], KEYS[5]) == 0 then repeat
  local last = redis.pcall('GET', KEYS[2])
--@include _fence_last.lua
--@include _fence_now.lua
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then break end
  redis.call('SET', KEYS[2], fence, 'PX', ARGV[5])  -- (an integer below 2^53: exact)
  if ARGV[6] + 0 > 0 then redis.call('SET', KEYS[5], ARGV[1], 'PX', ARGV[3] + ARGV[6]) end
  return fence
until true end

--@later
--@include _acl.lua

-- A caller that queues itself must be one a release can tell: its own wake
-- channel (the member's waiter id after the wake prefix 8) is checked too.
local own = nil
if ARGV[4] ~= '' and ARGV[8] then own = ARGV[8] .. string.match(ARGV[4], '^([^|]*)') end

for i = 3, 4 do
  if other_type(KEYS[i], 'zset') then return {WRONG_TYPE, KEYS[i]} end
end
local holder = redis.pcall('GET', KEYS[1])
if wrong(holder) then return {WRONG_TYPE, KEYS[1]} end
local last = redis.pcall('GET', KEYS[2])
if wrong(last) or (last and not stored_fence(last)) then return {WRONG_TYPE, KEYS[2]} end

local now = now_us()
local now_ms = math.floor(now / 1000)
local timeout = tonumber(ARGV[7])

local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms)
-- (everything above only reads: a refusal there writes nothing)
local denied
if ARGV[4] == '' and #expired == 0 then
  -- An attempt that does not queue, with no waiter to drop, writes first the
  -- lock's SET or (a retry of its own grant) its PEXPIRE; after it, it may
  -- only run SET and DEL: those are checked now, and nothing else it could
  -- never run on this path.
  denied = acl_need({'SET', 'DEL'})
else
  denied = acl_commands() or acl_channels(own, nil, ARGV[8] or '')
end
if denied then return {DENIED, denied} end

-- drop the waiters whose deadline has passed
for _, member in ipairs(expired) do
  redis.call('ZREM', KEYS[3], member)
  redis.call('ZREM', KEYS[4], member)
end

local function leave_queue()
  if ARGV[4] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[4])
    redis.call('ZREM', KEYS[4], ARGV[4])
  end
end

local function busy(wait)
  if ARGV[4] ~= '' then
    if not redis.call('ZSCORE', KEYS[3], ARGV[4]) then
      local arrival = now
      local tail = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
      if #tail > 0 and tonumber(tail[2]) >= arrival then arrival = tonumber(tail[2]) + 1 end
      redis.call('ZADD', KEYS[3], string.format('%.0f', arrival), ARGV[4])
    end
    redis.call('ZADD', KEYS[4], now_ms + timeout, ARGV[4])
    -- both keys outlive the last deadline set
    local keep = timeout + 60000
    for i = 3, 4 do
      if redis.call('PTTL', KEYS[i]) < keep then redis.call('PEXPIRE', KEYS[i], keep) end
    end
  end
  return {BUSY, wait}
end

if holder then
  if holder == ARGV[1] then
    leave_queue()
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    delay_after(KEYS[5], ARGV[1], ARGV[3], tonumber(ARGV[6]))
    return kept_fence(KEYS[2], last and stored_fence(last), ARGV[5])
  end
  local pttl = redis.call('PTTL', KEYS[1])
  if string.sub(holder, 1, #ARGV[2]) == ARGV[2] then return {OWNED_BY_CALLER, pttl} end
  return busy(pttl)
end

local delayed = redis.call('PTTL', KEYS[5])
if delayed > 0 then return busy(delayed) end

local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if head and head ~= ARGV[4] then
  -- someone is ahead: it takes the lock soon, or is dropped at its deadline
  local deadline = tonumber(redis.call('ZSCORE', KEYS[4], head)) or (now_ms + timeout)
  return busy(math.max(deadline - now_ms, 1))
end

local fence = next_fence(last)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('SET', KEYS[2], fence, 'PX', ARGV[5])  -- (an integer below 2^53: exact)
leave_queue()
delay_after(KEYS[5], ARGV[1], ARGV[3], tonumber(ARGV[6]), delayed)
return fence
