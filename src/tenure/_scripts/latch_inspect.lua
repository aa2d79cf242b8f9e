-- latch_inspect.lua: read-only snapshot of a count-down latch.
--
-- KEYS[1]  count key     string holding an integer > 0; absent = zero
-- KEYS[2]  opened key    string holding an integer: the number of the last opening
-- KEYS[3]  by key        string: the encoded label of who set the count
--
-- Returns  {1, {count, opened, by}}
--            count    integer, the count (0 when absent)
--            opened   integer, the number of the last opening (0 when none is stored)
--            by       string, the by key's value ("" when absent)
--          {5, key}   WRONG_TYPE: key holds a value of another type.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

local denied = acl_commands()
if denied then return {DENIED, denied} end

local current = redis.pcall('GET', KEYS[1])
if wrong(current) or (current and not tonumber(current)) then return {WRONG_TYPE, KEYS[1]} end
local opened = redis.pcall('GET', KEYS[2])
if wrong(opened) or (opened and not tonumber(opened)) then return {WRONG_TYPE, KEYS[2]} end
local by = redis.pcall('GET', KEYS[3])
if wrong(by) then return {WRONG_TYPE, KEYS[3]} end
return {OK, {math.max(tonumber(current) or 0, 0), tonumber(opened) or 0, by or ''}}
