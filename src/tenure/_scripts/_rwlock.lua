-- _rwlock.lua: what the read-write lock's scripts share; tenure._scripts puts
-- it in place of their line that includes it, after _common.lua. Not a script
-- of its own. The scripts take their KEYS in this order (extend takes
-- the first five, inspect the first four):
--
-- KEYS[1]  lock key      hash: "mode" = "write" while a write hold exists, else
--                        "read"; and one field per hold, "r:<owner id>" (a read
--                        hold) or "w:<owner id>" (the write hold), value
--                        "<count>|<fence>|<hold id>": the hold count (>= 1), the
--                        hold's fence (decimal) and the hold's id (the op id of
--                        the acquire that began it). The key expires with the
--                        latest hold (PEXPIREAT).
-- KEYS[2]  holds key     sorted set: member = a hold's field, score = the hold's
--                        expiry (server unix time, MILLISECONDS); expires as KEYS[1]
-- KEYS[3]  fence key     string holding an integer: the last fence minted
-- KEYS[4]  waiters key   sorted set, one queue for readers and writers: score =
--                        arrival (server µs), member =
--                        "<waiter id>|<claim ms>|<r or w>:<owner id>:<op id>";
--                        claim ms = the lease a hand-off to the member gives
--                        its hold (its claim window, see _common.lua's hand_off)
-- KEYS[5]  delay key     string: the write hold's lock-delay guard (value = its
--                        owner id); it outlives the write hold's lease by the
--                        lock-delay, and a release of the write hold deletes it,
--                        so while it exists without a write hold, a writer died
--                        holding and nobody gets in
-- KEYS[6]  last op key   string "<op id>|<+ or -><r or w>": the owner's last
--                        change of a count (120 s)
--
-- A hold whose expiry has passed is gone: every script that changes the lock
-- first drops such holds (prune), and after any change hands the lock to the
-- head of the queue while the head may have it (promote).

local LOCK, HOLDS, FENCE, WAITERS, DELAY = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

-- The last fence minted (a decimal string, or false), the fence key's ttl (ms),
-- and the owner's last op (KEYS[6]'s value, or false; read by rw_open_op).
local F = {last = false, ttl = 0, op = false}

-- Check the keys' types and read the last fence into F. Returns the name of a
-- key that holds another type, or nil.
local function rw_open(fence_ttl)
  for _, k in ipairs({{LOCK, 'hash'}, {HOLDS, 'zset'}, {WAITERS, 'zset'}}) do
    if other_type(k[1], k[2]) then return k[1] end
  end
  local last = redis.pcall('GET', FENCE)
  if wrong(last) or (last and not stored_fence(last)) then return FENCE end
  F.last, F.ttl = last, fence_ttl
  return nil
end

-- rw_open, then read the owner's last op (KEYS[6]) into F.op: for the scripts
-- that change a count. Returns the name of a key that holds another type, or nil.
local function rw_open_op(fence_ttl)
  local bad = rw_open(fence_ttl)
  if bad then return bad end
  local op = redis.pcall('GET', KEYS[6])
  if wrong(op) then return KEYS[6] end
  F.op = op
  return nil
end

-- The server's clock in whole milliseconds.
local function now_ms()
  return math.floor(now_us() / 1000)
end

-- A hold {count, fence (string), id}, or nil when the field is absent.
local function hold(field)
  local v = redis.call('HGET', LOCK, field)
  if not v then return nil end
  local c, f, id = string.match(v, '^(%d+)|(%d+)|(.*)$')
  if not c then return nil end
  return {count = tonumber(c), fence = f, id = id}
end

local function put(field, count, fence, id)
  redis.call('HSET', LOCK, field, string.format('%d|%s|%s', count, fence, id))
end

-- Drop a hold (released, or expired): its field and its expiry; with the write
-- hold, the mode goes back to "read".
local function drop(field)
  redis.call('HDEL', LOCK, field)
  redis.call('ZREM', HOLDS, field)
  if string.sub(field, 1, 2) == 'w:' then redis.call('HSET', LOCK, 'mode', 'read') end
end

-- Make the lock's two keys agree after a change: both gone when no hold is
-- left, else both expire with the latest hold.
local function settle()
  local latest = redis.call('ZRANGE', HOLDS, -1, -1, 'WITHSCORES')
  if #latest == 0 then
    redis.call('DEL', LOCK, HOLDS)
    return
  end
  redis.call('PEXPIREAT', LOCK, latest[2])
  redis.call('PEXPIREAT', HOLDS, latest[2])
end

-- Drop the holds whose expiry has passed (their holders died or stalled). If
-- one of the two keys is gone (deleted by hand), the other goes too.
local function prune(now)
  if redis.call('EXISTS', LOCK) == 0 or redis.call('EXISTS', HOLDS) == 0 then
    redis.call('DEL', LOCK, HOLDS)
    return
  end
  for _, field in ipairs(redis.call('ZRANGEBYSCORE', HOLDS, '-inf', now)) do drop(field) end
end

local function write_held()
  return redis.call('HGET', LOCK, 'mode') == 'write'
end

-- Milliseconds a dead writer's lock-delay still keeps everyone out (0: none).
local function delayed()
  local left = redis.call('PTTL', DELAY)
  if left > 0 then return left end
  return 0
end

-- Whether a new hold of mode m ('r' or 'w') may begin now, queue aside: a
-- writer when nothing is held, a reader while no writer holds.
local function free_for(m)
  if delayed() > 0 then return false end
  if m == 'w' then return redis.call('ZCARD', HOLDS) == 0 end
  return not write_held()
end

-- Keep the fence key for at least `lease` ms more.
local function keep_fence(lease)
  if F.last then redis.call('PEXPIRE', FENCE, math.max(F.ttl, lease)) end
end

-- The fence of a new hold, as digits: a writer's is minted (the larger of the
-- last + 1 and the server's TIME in µs); a reader's is the last one minted
-- (written as digits whatever the fence key's form, "7.0" or " 7": a hold's
-- field stores digits), or one is minted when none is known or the last is
-- below 0 (no fence a bare reply can carry).
local function fence_for(m)
  if m == 'r' and F.last and F.last + 0 >= 0 then return string.format('%.0f', F.last) end
  return string.format('%.0f', next_fence(F.last))
end

-- Store `fence` (from fence_for) as the last fence, or keep the last one alive.
local function use_fence(fence, lease)
  if fence ~= F.last then
    redis.call('SET', FENCE, fence, 'PX', math.max(F.ttl, lease))
    F.last = fence
  else
    keep_fence(lease)
  end
end

-- Begin a hold of mode m for owner with count 1: lease ms from now, with its
-- fence and id; a write hold gets the lock-delay guard (delay ms, 0 = none).
local function begin(m, owner, lease, fence, id, now, delay)
  local field = m .. ':' .. owner
  use_fence(fence, lease)
  put(field, 1, fence, id)
  redis.call('ZADD', HOLDS, now + lease, field)
  if m == 'w' then
    redis.call('HSET', LOCK, 'mode', 'write')
    delay_after(DELAY, owner, lease, delay)
  else
    redis.call('HSETNX', LOCK, 'mode', 'read')
  end
end

-- Hand the lock to the head of the queue while the head may have it: a writer,
-- alone, when nothing is held; readers, one after another up to the next
-- writer, while no writer holds. Each is told "<fence> <r or w>:<owner>:<op>"
-- on its wake channel (prefix .. waiter id) and holds the lock by then, with a
-- lease of its claim window, which it extends to its full lease at once; a
-- waiter whose message reaches no subscriber is gone: dropped. After a
-- hand-off, the waiter then first in line is told "recheck <ms>" (see
-- _common.lua), ms = the shortest claim handed. `mine` is the caller's own
-- member: it is given the lock without a message, for `mine_lease` ms (the
-- caller's full lease), and its {fence, hold id} is returned (else false).
local function promote(now, prefix, delay, mine, mine_lease)
  local granted = false
  local shortest = nil
  while true do
    local head = redis.call('ZRANGE', WAITERS, 0, 0)[1]
    if not head then break end
    local w, lease, m, owner, id = string.match(head, '^([^|]*)|(%d+)|([rw]):([^:]+):(.+)$')
    if w and not free_for(m) then break end
    redis.call('ZREM', WAITERS, head)
    -- (a member whose owner holds that mode already is left over from a wait
    -- that ended without leaving the queue: dropped)
    if w and not hold(m .. ':' .. owner) then
      lease = tonumber(lease)
      local fence = fence_for(m)
      local told = head == mine
      if not told then
        local token = m .. ':' .. owner .. ':' .. id
        told = tell(prefix .. w, fence .. ' ' .. token) > 0
      end
      if told then
        if head == mine then
          lease = tonumber(mine_lease)
          granted = {tonumber(fence), id}
        elseif not shortest or lease < shortest then
          shortest = lease
        end
        begin(m, owner, lease, fence, id, now, delay)
      end
    end
  end
  if shortest then recheck(prefix, redis.call('ZRANGE', WAITERS, 0, 0)[1], shortest) end
  return granted
end
