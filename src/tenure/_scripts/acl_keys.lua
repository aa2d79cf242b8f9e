-- acl_keys.lua: find what the connected user lacks, after the server refused
-- a script with NOPERM: EVALSHA refusing its KEYS (the refusal names no key),
-- or a command the script ran without checking it first (Redis 7.0's refusal
-- names none). Runs nothing on the keys it checks: it takes them as ARGV,
-- declaring no KEYS, so EVAL itself passes. Read-only; a diagnosis, not a
-- guard.
--
-- KEYS[1]       none: no KEYS are given (EVAL ... 0), so EVAL itself checks no key
-- ARGV[1]       n          the number of keys that follow
-- ARGV[2..n+1]  keys       the refused script's KEYS, in order
-- ARGV[n+2..]   commands   the commands the refused script may run (upper case)
--
-- Returns  {9, {perm, key}}  DENIED: the first key the user may not read
--                            (perm = "read") or write ("write"); on Redis 6.2,
--                            whose ACL has no read/write split, perm = "key".
--          {9, {"command", name}}  DENIED: every key is allowed, but not the
--                            command name (checked with the first key, as the
--                            scripts' guard does; Redis >= 7.0 and Valkey).
--          {1, 0}            OK: every key and command is allowed (the
--                            refusal was another).
--
-- redis.acl_check_cmd checks a command and its key at once: a key is refused
-- to the user only when every command below that reads it (writes it) is, so
-- that a user who may use the key but lacks one command (GET, say) is not
-- told that the key is refused.

--@include _common.lua
--@include _acl.lua

local check = redis.acl_check_cmd

-- Whether the user may run one of the commands that read `key`.
local function readable(key)
  return check('GET', key) or check('EXISTS', key) or check('TYPE', key) or check('PTTL', key)
end

-- Whether the user may run one of the commands that write `key`.
local function writable(key)
  return check('SET', key, '') or check('DEL', key) or check('PERSIST', key)
end

local n = tonumber(ARGV[1])
for i = 2, n + 1 do
  local key = ARGV[i]
  if check then
    if not readable(key) then return {DENIED, {'read', key}} end
    if not writable(key) then return {DENIED, {'write', key}} end
  else
    local reply = redis.pcall('EXISTS', key)
    if type(reply) == 'table' and reply.err then return {DENIED, {'key', key}} end
  end
end
-- the commands (a wake's PUBLISH is checked with its channel, up front)
local commands = {}
for i = n + 2, #ARGV do
  if not string.find(ARGV[i], 'PUBLISH$') then commands[#commands + 1] = ARGV[i] end  -- (SPUBLISH too)
end
local denied = acl_need(commands, n > 0 and ARGV[2] or nil)
if denied then return {DENIED, denied} end
return {OK, 0}
