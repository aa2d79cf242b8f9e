-- _semaphore.lua: helpers that tenure._scripts puts in place of the include
-- line of every semaphore script (after _common.lua and _permits.lua, whose
-- helpers they use). Not a script of its own. Every semaphore script has the
-- same KEYS:
--
-- KEYS[1]  holders key   sorted set with one member per held permit,
--                        "<token>#<i>" (i = 1..n for a lease of n permits), score =
--                        the lease's expiry in server MILLISECONDS; the key's PX is
--                        the latest expiry
-- KEYS[2]  permits key   string holding an integer: the permit count
-- KEYS[3]  fence key     string holding an integer: the last fence minted
-- KEYS[4]  waiters key   sorted set, score = arrival (server µs), member =
--                        "<waiter id>|<claim ms>|<n>|<token>": claim ms = the
--                        lease a hand-off to the member gives its permits
--                        (its claim window, see _common.lua's hand_off)
--
-- Rule: every script that drops expired permits (sem_prune) then hands the free
-- permits to the waiters that fit (sem_promote), so that a crashed holder's
-- permits go on to the queue as soon as anyone touches the semaphore.

-- The first key that holds a value of another type (or a string that is not an
-- integer a fence or a count can be: stored_fence), or nil.
local function sem_wrong_key()
  for i, want in ipairs({'zset', 'string', 'string', 'zset'}) do
    local t = redis.call('TYPE', KEYS[i]).ok
    if t ~= 'none' and t ~= want then return KEYS[i] end
    if t == 'string' and not stored_fence(redis.call('GET', KEYS[i])) then return KEYS[i] end
  end
  return nil
end

-- The semaphore as this call sees it: the server's clock, the stored permit
-- count (nil when none is stored) and the count in force (`fallback`, the
-- caller's count, when none is stored), and the last fence (false when none).
local function sem_open(fallback)
  local now = now_us()
  local stored = tonumber(redis.call('GET', KEYS[2]))
  return {now_us = now, now_ms = math.floor(now / 1000), stored = stored,
          total = stored or tonumber(fallback), last = redis.call('GET', KEYS[3])}
end

-- Drop the permits whose lease ended.
local function sem_prune(s)
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', s.now_ms))
end

-- Whether `token` holds permits now.
local function sem_holds(s, token)
  local expiry = redis.call('ZSCORE', KEYS[1], token .. '#1')
  return expiry and tonumber(expiry) > s.now_ms
end

-- The next fence (a decimal string); sem_keep_fence stores it once given out.
local function sem_next_fence(s)
  return string.format('%.0f', next_fence(s.last))
end

-- Store `fence` as the last one minted; the fence key lives `ttl` ms.
local function sem_keep_fence(s, fence, ttl)
  redis.call('SET', KEYS[3], fence, 'PX', string.format('%.0f', ttl))
  s.last = fence
  return fence
end

-- Hand free permits to the first waiters, in arrival order, while the first
-- one fits: a waiter asking for more permits than are free waits, and so does
-- everyone behind it (no starvation of large requests). Each waiter gets its
-- permits with a lease of its claim window and a new fence, and "<fence>
-- <token>" is published on its wake channel (`wake_prefix` .. waiter id); the
-- waiter extends the lease to its full length at once. A waiter whose PUBLISH
-- reaches no subscriber is gone: dropped (a head that waits for more permits
-- than are free is asked with "probe", so that a dead one does not keep the
-- free permits from those behind it). One asking for more permits than the
-- count (after the count shrank) is dropped and told "recheck 0", so that its
-- next attempt, at once, is refused with the count. After a
-- hand-off, the waiter then first in line is told "recheck <ms>" (see
-- _common.lua), ms = the shortest claim handed. `own` is the caller's waiters
-- member ("" if none): when reached, it is granted without a message, for
-- `own_lease` ms (the caller's full lease). Returns the fence granted to
-- `own`, or nil.
local function sem_promote(s, wake_prefix, fence_ttl, own, own_lease)
  local free = s.total - redis.call('ZCARD', KEYS[1])
  local granted = nil
  local shortest = nil
  while free > 0 do
    local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
    if not head then break end
    local w, lease, n, token = string.match(head, '^([^|]*)|(%d+)|(%d+)|(.+)$')
    local fits = w and tonumber(n) >= 1 and tonumber(n) <= s.total
    local gone = false
    if fits and tonumber(n) > free then
      -- It keeps everyone behind it waiting, free permits or not: only while it
      -- lives. "probe" (which hubs ignore) reaching nobody says it is gone.
      if head == own or tell(wake_prefix .. w, 'probe') > 0 then break end
      gone = true
    end
    redis.call('ZREM', KEYS[4], head)
    if w and not fits then recheck(wake_prefix, head, 0) end
    if fits and not gone then
      n, lease = tonumber(n), tonumber(lease)
      local fence = sem_next_fence(s)
      if head == own then lease = tonumber(own_lease) end
      if head == own or tell(wake_prefix .. w, fence .. ' ' .. token) > 0 then
        sem_set_lease(token, n, s.now_ms + lease, false)
        sem_keep_fence(s, fence, math.max(fence_ttl, lease))
        free = free - n
        if head == own then
          granted = fence
        elseif not shortest or lease < shortest then
          shortest = lease
        end
      end
    end
  end
  if shortest then
    recheck(wake_prefix, redis.call('ZRANGE', KEYS[4], 0, 0)[1], shortest)
  end
  return granted
end

-- Drop from the queue every waiter asking for more permits than the count in
-- force, telling each "recheck 0": its next attempt, at once, is refused with
-- the count (rather than when its timer, a holder's lease, runs out).
local function sem_drop_too_large(s, wake_prefix)
  for _, member in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    local n = tonumber(string.match(member, '^[^|]*|%d+|(%d+)|'))
    if n and n > s.total then
      redis.call('ZREM', KEYS[4], member)
      recheck(wake_prefix, member, 0)
    end
  end
end

-- Milliseconds until the first lease ends (-1 when no permit is held).
local function sem_next_expiry(s)
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if not first[2] then return -1 end
  return math.max(1, tonumber(first[2]) - s.now_ms)
end

-- Make the holders key expire with its latest lease (Redis deletes it sooner
-- when its last member is removed).
local function sem_touch(s)
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.max(1, tonumber(last[2]) - s.now_ms)))
  end
end
