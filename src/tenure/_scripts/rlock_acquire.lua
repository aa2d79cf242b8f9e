-- rlock_acquire.lua: take a reentrant lock for an owner, enter it again, or
-- claim a hold that a release handed to the caller; when another owner holds
-- it, queue the caller so that a release hands the lock straight to it (see
-- rlock_release.lua).
--
-- KEYS[1]  lock key      hash with one field: the holder's owner id, value = its
--                        hold count (integer >= 1); the key's PX is the lease
-- KEYS[2]  fence key     string holding an integer: the last fence minted for the name
-- KEYS[3]  waiters key   sorted set, score = arrival (server µs), member =
--                        "<waiter id>|<lease ms>|<owner id>"
-- ARGV[1]  owner         string; the caller's owner id
-- ARGV[2]  lease         integer MILLISECONDS, > 0
-- ARGV[3]  member        the caller's waiters member (as KEYS[3]), or "" when not queued
-- ARGV[4]  fence ttl     integer MILLISECONDS the fence key outlives its last use
--                        (at least the lease)
--
-- Returns  {1, fence}     OK: the caller holds the lock, and its lease now ends
--                         ARGV[2] ms from now.
--                         - The lock was free: a new hold with count 1 and a new
--                           fence = the larger of the last fence + 1 and the
--                           server's TIME in µs (it increases across a restart).
--                         - The caller already holds it and is not queued: count + 1;
--                           fence = the hold's fence (the same as its first acquire).
--                         - The caller already holds it and is queued (ARGV[3] ~= ""):
--                           a release handed the hold to it; count unchanged (1).
--          {2, pttl_ms}   BUSY: another owner holds it; pttl_ms = its remaining
--                         lease, -1 when it has no expiry. ARGV[3], if given, is queued.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.

--@include _common.lua

local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then return {5, KEYS[1]} end
local last = redis.pcall('GET', KEYS[2])
if wrong(last) or (last and not tonumber(last)) then return {5, KEYS[2]} end
if ARGV[3] ~= '' then
  local t = redis.call('TYPE', KEYS[3]).ok
  if t ~= 'none' and t ~= 'zset' then return {5, KEYS[3]} end
end
local fence_ttl = math.max(tonumber(ARGV[4]), tonumber(ARGV[2]))

local function mint()
  local fence = next_fence(last)
  redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', fence_ttl)
  return fence
end

if kind == 'none' then
  local fence = mint()
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] ~= '' then redis.call('ZREM', KEYS[3], ARGV[3]) end
  return {1, fence}
end

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  if ARGV[3] == '' then
    redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  else
    redis.call('ZREM', KEYS[3], ARGV[3])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if not last then return {1, mint()} end -- the fence key was deleted: seed anew
  redis.call('PEXPIRE', KEYS[2], fence_ttl)
  return {1, tonumber(last)}
end

local pttl = redis.call('PTTL', KEYS[1])
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[3], 'NX', now_us(), ARGV[3])
  redis.call('PEXPIRE', KEYS[3], math.max(pttl, 0) + 60000)
end
return {2, pttl}
