-- _acl.lua: the ACL guard that every script runs first, before it writes
-- anything. Not a script of its own. Inside a script, a command the user may
-- not run fails at that command, and the writes made before it stay (a
-- refusal before the first write aborts the script with nothing written): so
-- each script checks up front what it may run after its first write (all of
-- its commands, acl_commands(); or, on a path known to run only some of them,
-- just those, acl_need()), and replies
--
--          {9, {permission, name}}  DENIED: the connected user may not do all
--                                   this script may do; nothing was written.
--                                   permission = "channel" (name = a channel
--                                   it may PUBLISH to) or "command" (name =
--                                   the command, upper case).
--
-- (A key the user may not read and write makes EVALSHA itself fail, before
-- the script runs; the client then finds which key with acl_keys.lua, whose
-- reply has permission "read", "write" or, on Redis 6.2, "key".)
--
-- tenure._scripts replaces the marker line below by the commands the script
-- may run (acl_command_list(): its own calls and those of the helpers it uses;
-- a function, so that a path that never checks them all builds no table).
--@acl

-- On Redis 6.2 (no redis.acl_check_cmd): the {permission, name} of a pcall
-- error reply, or nil when it is not an ACL error.
local function acl_reason(reply, what, name, command)
  local text = string.lower(reply.err)
  if not (string.find(text, 'acl', 1, true) or string.find(text, 'permission', 1, true)
          or string.find(text, 'can\'t', 1, true)) then
    return nil
  end
  if string.find(text, 'channel', 1, true) then return {'channel', name} end
  if string.find(text, ' run ', 1, true) then return {'command', command} end
  return {what, name}
end

-- Why the connected user can't run this script's commands, as {'command',
-- name}, or nil when it can. (Its keys need no check here: EVALSHA checks the
-- KEYS it is given, read and write, before the script starts.) Redis >= 7.0
-- and Valkey: redis.acl_check_cmd for each command of acl_command_list() with the
-- script's first key, which runs nothing. Redis 6.2 can't check a command
-- without running it: commands are not checked there (tenure doctor lists
-- those a primitive needs).
local function acl_commands()
  local check = redis.acl_check_cmd
  if not check then return nil end
  local key = KEYS[1]
  local commands = acl_command_list()
  for i = 1, #commands do
    local command = commands[i]
    local ok = true
    if command == 'TIME' then
      ok = check(command)
    elseif key and command ~= 'PUBLISH' then
      ok = check(command, key)
    end
    if not ok then return {'command', command} end
  end
  return nil
end

-- Why the connected user can't run the commands of `needed` (upper case), as
-- {'command', name}, or nil when it can: acl_commands() for a path of a
-- script that is known to run no other command after its first write (a
-- refusal before the first write aborts the script with nothing written,
-- and the client names the command from the error). Each is checked with
-- `key` (default: the script's first key). Redis >= 7.0 and Valkey only, as
-- acl_commands().
local function acl_need(needed, key)
  local check = redis.acl_check_cmd
  if not check then return nil end
  key = key or KEYS[1]
  for i = 1, #needed do
    local command = needed[i]
    local ok
    if command == 'TIME' or not key then ok = check(command) else ok = check(command, key) end
    if not ok then return {'command', command} end
  end
  return nil
end

-- Why the connected user can't PUBLISH on the channels this call may tell, as
-- {'channel', name}, or nil when it can: `channel` (a fixed one, or nil), and
-- the wake channels of the first two members of the sorted set `queue` (or
-- nil; waiter id = the member up to its first "|", channel = `wake_prefix` ..
-- waiter id), the ones a hand-off tells first (every wake channel of a
-- primitive shares one prefix, so a sensible rule allows all or none).
-- Redis 6.2 (no redis.acl_check_cmd): each channel is probed by a PUBLISH of
-- the word "probe", which waiters ignore.
local function acl_channels(channel, queue, wake_prefix)
  local channels = {}
  if channel then channels[1] = channel end
  local heads = queue and redis.pcall('ZRANGE', queue, 0, 1)
  if heads and not heads.err then  -- (another type: the script reports WRONG_TYPE)
    for _, member in ipairs(heads) do
      local w = string.match(member, '^([^|]*)|')
      if w then channels[#channels + 1] = wake_prefix .. w end
    end
  end
  local check = redis.acl_check_cmd
  for _, ch in ipairs(channels) do
    if check then
      if not check('PUBLISH', ch, 'probe') then return {'channel', ch} end
    else
      local reply = redis.pcall('PUBLISH', ch, 'probe')
      if type(reply) == 'table' and reply.err then
        local reason = acl_reason(reply, 'channel', ch, 'PUBLISH')
        if reason then return reason end
      end
    end
  end
  return nil
end

-- acl_commands(), then acl_channels(channel, queue, wake_prefix).
local function acl_denied(channel, queue, wake_prefix)
  return acl_commands() or acl_channels(channel, queue, wake_prefix)
end
