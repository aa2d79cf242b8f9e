-- lock_extend.lua: reset a held lease to expire ARGV[2] ms from now.
--
-- KEYS[1]  lock key      string; value = the holder's owner token
-- ARGV[1]  token         string; the lease's owner token
-- ARGV[2]  lease         integer MILLISECONDS, > 0
--
-- Returns  {1, 0}        OK: the lease now ends ARGV[2] ms from now.
--          {4, 0}        NOT_OWNED: not held with this token (expired or another's).
--          {5, key}      WRONG_TYPE: key holds a value of another type.

local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' and holder.err then return {5, KEYS[1]} end
if holder ~= ARGV[1] then return {4, 0} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, 0}
