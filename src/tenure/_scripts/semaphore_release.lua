-- semaphore_release.lua: give back a lease's permits, and hand the free permits
-- to the first waiters that fit (see _semaphore.lua, sem_promote). Also used by
-- a waiter that gives up, to leave the queue and give back permits handed to
-- it, in the same call.
--
-- KEYS[1]  holders key   sorted set, a member "<token>#<i>" per held permit,
--                        score = expiry (server ms) (see _semaphore.lua)
-- KEYS[2]  permits key   string holding an integer: the permit count
-- KEYS[3]  fence key     string holding an integer: the last fence minted
-- KEYS[4]  waiters key   sorted set of waiters (see _semaphore.lua)
-- KEYS[5]  released key  sorted set: the call ids of the last 1000 releases
--                        (see released_record in _common.lua); kept 120 s
--                        so that the same call retried after a lost reply is
--                        recognised (and no other call with the token)
-- ARGV[1]  token         string; the lease's token
-- ARGV[2]  n             integer >= 1; the lease's permits
-- ARGV[3]  permits       integer >= 1; the caller's permit count, used if none is stored
-- ARGV[4]  member        a waiters member to remove first (a waiter leaving), or ""
-- ARGV[5]  wake prefix   string; waiter w is told by PUBLISH on ARGV[5] .. w
-- ARGV[6]  fence ttl     integer MILLISECONDS the fence key outlives its last use
-- ARGV[7]  op            string; this release call's id (a retry of the call
--                        sends the same), or "" for a release never retried
--
-- Returns  {1, 0}        OK: released; the permits went to waiters, or are free
--                        (or this very call had been done: a retry, same op).
--          {4, 0}        NOT_OWNED: the token holds no permits (its lease expired,
--                        or it was released); only ARGV[4] was removed (and
--                        expired permits were handed on).
--          {5, key}      WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _semaphore.lua
--@include _acl.lua

local denied = acl_denied(nil, KEYS[4], ARGV[5])
if denied then return {DENIED, denied} end

local rtype = released_type(KEYS[5])
local bad = sem_wrong_key() or released_wrong(KEYS[5], rtype)
if bad then return {WRONG_TYPE, bad} end
local s = sem_open(ARGV[3])
sem_prune(s)
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[4], ARGV[4]) end
local held = sem_holds(s, ARGV[1])
if held then
  sem_drop_lease(ARGV[1], tonumber(ARGV[2]))
  if ARGV[4] == '' then released_record(KEYS[5], rtype, ARGV[7]) end
end
sem_promote(s, ARGV[5], tonumber(ARGV[6]), '')
sem_touch(s)
if held then return {OK, 0} end
return not_held(KEYS[5], rtype, ARGV[7])
