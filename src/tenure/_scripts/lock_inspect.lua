-- lock_inspect.lua: read-only snapshot of a lock.
--
-- KEYS[1]  lock key      string; value = the holder's owner token
-- KEYS[2]  fence key     string holding an integer
-- KEYS[3]  waiters key   sorted set of waiter ids
--
-- Returns  {1, {holder, pttl_ms, fence, waiters}}
--            holder   string, "" when free
--            pttl_ms  integer; -2 when free, -1 when held with no expiry
--            fence    integer, the last fence minted (0 if none is known)
--            waiters  integer, the number of registered waiting processes
--          {5, key}   WRONG_TYPE: key holds a value of another type.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

local denied = acl_commands()
if denied then return {DENIED, denied} end

local holder = redis.pcall('GET', KEYS[1])
if wrong(holder) then return {WRONG_TYPE, KEYS[1]} end
local fence = redis.pcall('GET', KEYS[2])
-- (a value no fence is, such as an integer beyond 2^53, is another type too,
-- as the acquire says)
if wrong(fence) or (fence and not stored_fence(fence)) then return {WRONG_TYPE, KEYS[2]} end
if other_type(KEYS[3], 'zset') then return {WRONG_TYPE, KEYS[3]} end
return {OK, {holder or '', redis.call('PTTL', KEYS[1]), tonumber(fence) or 0,
            redis.call('ZCARD', KEYS[3])}}
