-- _common.lua: helpers that tenure._scripts puts in place of the include line
-- of every script that asks for them (after its header contract). Not a script
-- of its own.

-- Whether a redis.pcall reply is an error (for instance WRONGTYPE).
local function wrong(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

-- The server's clock in whole microseconds.
local function now_us()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- The fence after `last` (the fence key's value, or false when none is
-- stored): last + 1, or else the server's clock in µs, so that fences keep
-- increasing after the fence key is lost (expiry, restart).
local function next_fence(last)
  if last then return tonumber(last) + 1 end
  return now_us()
end
