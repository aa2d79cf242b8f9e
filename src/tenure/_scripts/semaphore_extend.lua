-- semaphore_extend.lua: reset a lease's permits to expire ARGV[3] ms from now.
--
-- KEYS[1]  holders key   sorted set, a member "<token>#<i>" per held permit,
--                        score = expiry (server ms) (see _semaphore.lua)
-- KEYS[2]  permits key   string holding an integer: the permit count
-- KEYS[3]  fence key     string holding an integer: the last fence minted
-- KEYS[4]  waiters key   sorted set of waiters (see _semaphore.lua)
-- ARGV[1]  token         string; the lease's token
-- ARGV[2]  n             integer >= 1; the lease's permits
-- ARGV[3]  lease         integer MILLISECONDS, > 0
-- ARGV[4]  permits       integer >= 1; the caller's permit count, used if none is stored
-- ARGV[5]  wake prefix   string; waiter w is told by PUBLISH on ARGV[5] .. w
-- ARGV[6]  fence ttl     integer MILLISECONDS the fence key outlives its last use
--
-- Returns  {1, 0}        OK: the permits now expire ARGV[3] ms from now.
--          {4, 0}        NOT_OWNED: the token holds no permits (its lease expired,
--                        or it was released); expired permits were handed on.
--          {5, key}      WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua
--@include _permits.lua

-- The usual path: the token holds its permits and nobody is queued. Its reply
-- is the one the general path below would give, but for keys it does not
-- touch (the permit count, the fence), whose types it does not check; any
-- other case (or a key it touches holding another type) returns nil having
-- written nothing, and the general path decides. When others hold permits
-- too, their ended leases are dropped first, as the general path does. It
-- checks with the ACL guard only the commands it may run after its first
-- write, and comes before _semaphore.lua, whose helpers only the general path
-- makes (a script's chunk makes every function it defines at every call).
local function fast_extend(token, n, lease)
  if redis.pcall('ZCARD', KEYS[4]) ~= 0 then return nil end
  local held = redis.pcall('ZCARD', KEYS[1])
  if type(held) ~= 'number' or held < n then return nil end
  local expiry = redis.call('ZSCORE', KEYS[1], token .. '#1')
  if not expiry then return nil end
  local now = math.floor(now_us() / 1000)
  if tonumber(expiry) <= now then return nil end  -- (NOT_OWNED)
  if held == n and tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]) <= now then
    return nil  -- (a permit of its lease ended before the others: the general path drops it)
  end
  local denied
  if held > n then  -- (the first write: the ended leases' ZREMRANGEBYSCORE)
    denied = acl_need({'ZADD', 'ZRANGE', 'PEXPIRE'})
  else  -- (the first write: the permits' ZADD)
    denied = acl_need({'PEXPIRE'})
  end
  if denied then return {DENIED, denied} end
  local latest = now + lease
  if held > n then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    sem_set_lease(token, n, latest, true)
    latest = tonumber(redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2])
  else
    sem_set_lease(token, n, latest, true)
  end
  redis.call('PEXPIRE', KEYS[1], math.max(1, latest - now))
  return {OK, 0}
end

do
  local reply = fast_extend(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
  if reply then return reply end
end

--@include _semaphore.lua

local denied = acl_denied(nil, KEYS[4], ARGV[5])
if denied then return {DENIED, denied} end

local bad = sem_wrong_key()
if bad then return {WRONG_TYPE, bad} end
local s = sem_open(ARGV[4])
sem_prune(s)
local held = sem_holds(s, ARGV[1])
if held then sem_set_lease(ARGV[1], tonumber(ARGV[2]), s.now_ms + tonumber(ARGV[3]), true) end
sem_promote(s, ARGV[5], tonumber(ARGV[6]), '')
sem_touch(s)
if held then return {OK, 0} end
return {NOT_OWNED, 0}
