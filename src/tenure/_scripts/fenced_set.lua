-- fenced_set.lua: write a value only with a fence at least as large as every
-- fence this resource has accepted (the check a fenced resource makes:
-- Kleppmann, "How to do distributed locking", 2016).
--
-- KEYS[1]  resource key  string; the protected value
-- KEYS[2]  seen key      string holding an integer: the largest fence accepted
-- ARGV[1]  fence         decimal integer, the writer's fence
-- ARGV[2]  value         string to store at KEYS[1]
--
-- Returns  {1, 0}        OK: written; the seen fence is now ARGV[1]
--          {6, seen}     STALE: a write with a larger fence was accepted before; nothing written
--          {5, key}      WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

local denied = acl_commands()
if denied then return {DENIED, denied} end

local resource = redis.call('TYPE', KEYS[1]).ok
if resource ~= 'none' and resource ~= 'string' then return {WRONG_TYPE, KEYS[1]} end
local seen = redis.pcall('GET', KEYS[2])
if wrong(seen) or (seen and not tonumber(seen)) then return {WRONG_TYPE, KEYS[2]} end
if seen and tonumber(seen) > tonumber(ARGV[1]) then return {STALE, tonumber(seen)} end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[1])
return {OK, 0}
