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
--@include _permits.lua
--@include _semaphore.lua
--@include _acl.lua

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
