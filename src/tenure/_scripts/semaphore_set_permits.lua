-- semaphore_set_permits.lua: store a new permit count. Held permits are kept
-- (a smaller count makes new acquires wait until enough are given back); a
-- larger count hands the new permits to the first waiters that fit. Waiters
-- asking for more permits than the new count leave the queue and are told to
-- try again at once (their attempt is then refused with the count).
--
-- KEYS[1]  holders key   sorted set, a member "<token>#<i>" per held permit,
--                        score = expiry (server ms) (see _semaphore.lua)
-- KEYS[2]  permits key   string holding an integer: the permit count
-- KEYS[3]  fence key     string holding an integer: the last fence minted
-- KEYS[4]  waiters key   sorted set of waiters (see _semaphore.lua)
-- ARGV[1]  permits       integer >= 1; the new count
-- ARGV[2]  wake prefix   string; waiter w is told by PUBLISH on ARGV[2] .. w
-- ARGV[3]  fence ttl     integer MILLISECONDS the fence key outlives its last use
-- ARGV[4]  permits ttl   integer MILLISECONDS the permits key outlives its last use
--
-- Returns  {1, old}      OK: the count is now ARGV[1]; old = the count stored
--                        before (0 when none was).
--          {5, key}      WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _permits.lua
--@include _semaphore.lua
--@include _acl.lua

local denied = acl_denied(nil, KEYS[4], ARGV[2])
if denied then return {DENIED, denied} end

local bad = sem_wrong_key()
if bad then return {WRONG_TYPE, bad} end
local s = sem_open(ARGV[1])
s.total = tonumber(ARGV[1])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4])
sem_prune(s)
sem_drop_too_large(s, ARGV[2])
sem_promote(s, ARGV[2], tonumber(ARGV[3]), '')
sem_touch(s)
return {OK, s.stored or 0}
