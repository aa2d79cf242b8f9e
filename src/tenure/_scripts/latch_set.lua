-- latch_set.lua: set a count-down latch's count, only while it is zero.
--
-- KEYS[1]  count key     string holding an integer > 0; absent = zero
-- ARGV[1]  count         integer >= 1
--
-- Returns  {1, count}    OK: the count is now ARGV[1].
--          {2, current}   BUSY: the count is not zero (it is current); nothing written.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

-- (Its one write is its last command: no command needs checking before it,
-- as a refusal before the first write aborts the script with nothing written.)
local denied = acl_need({})
if denied then return {DENIED, denied} end

local current = redis.pcall('GET', KEYS[1])
if wrong(current) or (current and not tonumber(current)) then return {WRONG_TYPE, KEYS[1]} end
if current and tonumber(current) > 0 then return {BUSY, tonumber(current)} end
redis.call('SET', KEYS[1], ARGV[1])
return {OK, tonumber(ARGV[1])}
