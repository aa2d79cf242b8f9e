-- acl_keys.lua: find which key the connected user may not use, after EVALSHA
-- refused a script's KEYS with NOPERM (the refusal names no key). Runs nothing
-- on the keys it checks: it takes them as ARGV, declaring no KEYS, so EVAL
-- itself passes. Read-only; a diagnosis, not a guard.
--
-- KEYS[1]     none: no KEYS are given (EVAL ... 0), so EVAL itself checks no key
-- ARGV[1..n]  keys       the refused script's KEYS, in order
--
-- Returns  {9, {perm, key}}  DENIED: the first key the user may not read
--                            (perm = "read") or write ("write"); on Redis 6.2,
--                            whose ACL has no read/write split, perm = "key".
--          {1, 0}            OK: every key is allowed (the refusal was another:
--                            a command a script ran, say).
--
-- redis.acl_check_cmd checks a command and its key at once: a key is refused
-- to the user only when every command below that reads it (writes it) is, so
-- that a user who may use the key but lacks one command (GET, say) is not
-- told that the key is refused.

--@include _common.lua

local check = redis.acl_check_cmd

-- Whether the user may run one of the commands that read `key`.
local function readable(key)
  return check('GET', key) or check('EXISTS', key) or check('TYPE', key) or check('PTTL', key)
end

-- Whether the user may run one of the commands that write `key`.
local function writable(key)
  return check('SET', key, '') or check('DEL', key) or check('PERSIST', key)
end

for _, key in ipairs(ARGV) do
  if check then
    if not readable(key) then return {DENIED, {'read', key}} end
    if not writable(key) then return {DENIED, {'write', key}} end
  else
    local reply = redis.pcall('EXISTS', key)
    if type(reply) == 'table' and reply.err then return {DENIED, {'key', key}} end
  end
end
return {OK, 0}
