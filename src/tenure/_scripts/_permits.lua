-- _permits.lua: the permits of one semaphore lease, written and taken back;
-- what the semaphore scripts' uncontended paths share with _semaphore.lua
-- (which uses them, and comes after it). Not a script of its own. KEYS[1] is
-- the holders key (see _semaphore.lua).

-- The holders key's members are written in chunks of 100, to stay within
-- Lua's stack (a literal in each helper: a local of the chunk that both used
-- would be an upvalue, which costs every call that makes them, quick paths
-- too, about 0.1 µs).

-- Give `token` its n permits until `expiry` (ms); with `xx`, only reset the
-- expiry of permits it holds.
local function sem_set_lease(token, n, expiry, xx)
  local score = string.format('%.0f', expiry)
  local args = {}
  for i = 1, n do
    args[#args + 1] = score
    args[#args + 1] = token .. '#' .. i
    if #args == 200 or i == n then  -- (100 permits)
      if xx then
        redis.call('ZADD', KEYS[1], 'XX', unpack(args))
      else
        redis.call('ZADD', KEYS[1], unpack(args))
      end
      args = {}
    end
  end
end

-- Take back the n permits of `token`.
local function sem_drop_lease(token, n)
  local args = {}
  for i = 1, n do
    args[#args + 1] = token .. '#' .. i
    if #args == 100 or i == n then
      redis.call('ZREM', KEYS[1], unpack(args))
      args = {}
    end
  end
end
