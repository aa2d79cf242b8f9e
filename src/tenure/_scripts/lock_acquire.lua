-- lock_acquire.lua: take a lock (the SET NX PX protocol) and mint a fencing
-- token, or, when the lock is held, queue the caller so that a release hands
-- the lock straight to it (see lock_release.lua).
--
-- KEYS[1]  lock key      string; value = the holder's owner token
-- KEYS[2]  fence key     string holding an integer: the last fence minted for the name
-- KEYS[3]  waiters key   sorted set, score = arrival (server µs), member =
--                        "<waiter id>|<claim ms>|<token>": claim ms = the
--                        lease a release that hands the lock to the member
--                        sets (the waiter's claim window, see _common.lua)
-- KEYS[4]  delay key     string; value = the token of the holder it guards. It
--                        outlives the holder's lease by the lock-delay and a
--                        clean release deletes it, so while it exists without
--                        the lock key a dead holder's lease ended unreleased
--                        and the name stays unavailable.
-- ARGV[1]  token         string; the acquiring lease's owner token
-- ARGV[2]  owner prefix  string; a holder token that starts with it belongs to the caller
-- ARGV[3]  lease         integer MILLISECONDS, > 0
-- ARGV[4]  member        the caller's waiters member (as KEYS[3]), or "" to not queue
-- ARGV[5]  fence ttl     integer MILLISECONDS the fence key outlives its last use
-- ARGV[6]  lock-delay    integer MILLISECONDS, >= 0; 0 = no lock-delay for this hold
--
-- Returns  {1, fence}     OK: acquired. fence = the larger of the last fence + 1
--                         and the server's TIME in µs, so it increases even
--                         across a restart or a failover.
--                         A call whose token already holds the lock (a retry
--                         after a lost reply, or a hand-off whose message was
--                         lost) gets its own fence again, and its lease (and
--                         lock-delay guard) is reset to ARGV[3] ms from now.
--          {2, pttl_ms}   BUSY: another owner holds it (or its lock-delay
--                         runs); pttl_ms = how long that lasts, -1 when the
--                         holder set no expiry.
--          {3, pttl_ms}   OWNED_BY_CALLER: the caller's owner already holds it.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

local denied = acl_commands()
if denied then return {9, denied} end

if ARGV[4] ~= '' then
  local t = redis.call('TYPE', KEYS[3]).ok
  if t ~= 'none' and t ~= 'zset' then return {5, KEYS[3]} end
end

local function busy(pttl)
  if ARGV[4] ~= '' then
    redis.call('ZADD', KEYS[3], 'NX', now_us(), ARGV[4])
    redis.call('PEXPIRE', KEYS[3], math.max(pttl, 0) + 60000)
  end
  return {2, pttl}
end

local delayed = redis.call('PTTL', KEYS[4])
if delayed > 0 and redis.call('EXISTS', KEYS[1]) == 0 then return busy(delayed) end

-- SET NX also answers "is it free?" (a key of another type just makes it fail).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then
  local last = redis.pcall('GET', KEYS[2])
  if wrong(last) or (last and not tonumber(last)) then
    redis.call('DEL', KEYS[1])  -- undo: nothing written
    return {5, KEYS[2]}
  end
  local fence = next_fence(last)
  redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[5])
  if ARGV[4] ~= '' then redis.call('ZREM', KEYS[3], ARGV[4]) end
  local delay = tonumber(ARGV[6])
  if delay > 0 then
    redis.call('SET', KEYS[4], ARGV[1], 'PX', tonumber(ARGV[3]) + delay)
  elseif delayed ~= -2 then
    redis.call('DEL', KEYS[4])
  end
  return {1, fence}
end

local holder = redis.pcall('GET', KEYS[1])
if wrong(holder) then return {5, KEYS[1]} end

if holder == ARGV[1] then
  if ARGV[4] ~= '' then redis.call('ZREM', KEYS[3], ARGV[4]) end
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  local delay = tonumber(ARGV[6])
  if delay > 0 then redis.call('SET', KEYS[4], ARGV[1], 'PX', tonumber(ARGV[3]) + delay) end
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end

local pttl = redis.call('PTTL', KEYS[1])
if string.sub(holder, 1, #ARGV[2]) == ARGV[2] then return {3, pttl} end
return busy(pttl)
