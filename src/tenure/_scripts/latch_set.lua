-- latch_set.lua: set a count-down latch's count, only while it is zero, and
-- record who set it.
--
-- KEYS[1]  count key     string holding an integer > 0; absent = zero
-- KEYS[2]  by key        string: the setter's label, encoded as in a token
--                        ("" for none); it lives and dies with the count
-- ARGV[1]  count         integer >= 1
-- ARGV[2]  label         string: the setter's encoded label ("" for none)
--
-- Returns  {1, count}    OK: the count is now ARGV[1], the by key ARGV[2].
--          {2, current}   BUSY: the count is not zero (it is current); nothing written.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

-- (Its writes are two SETs, its last commands: a user who may not run SET is
-- refused at the first, which aborts the script with nothing written, and
-- EVALSHA checked both keys before the script began. Nothing needs checking.)
local denied = acl_need({})
if denied then return {DENIED, denied} end

local current = redis.pcall('GET', KEYS[1])
if wrong(current) or (current and not tonumber(current)) then return {WRONG_TYPE, KEYS[1]} end
if wrong(redis.pcall('GET', KEYS[2])) then return {WRONG_TYPE, KEYS[2]} end
if current and tonumber(current) > 0 then return {BUSY, tonumber(current)} end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return {OK, tonumber(ARGV[1])}
