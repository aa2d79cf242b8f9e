-- _common.lua: helpers that tenure._scripts puts in place of the include line
-- of every script that asks for them (after its header contract). Not a script
-- of its own. Every script includes it: it names the reply statuses.

-- The reply statuses (the first element of every reply, {status, value}):
-- tenure._scripts replaces the marker line below by one local per member of
-- its Status enum, of the same name and number (OK, BUSY, NOT_OWNED,
-- WRONG_TYPE, DENIED, ...), so that scripts reply by name.
--@status

-- Whether a redis.pcall reply is a WRONGTYPE error; any other error reply (Redis
-- 6.2's ACL refusing the command, say) is raised as it is.
local function wrong(reply)
  if type(reply) ~= 'table' or reply.err == nil then return false end
  -- Any other error (Redis 6.2's ACL refusing the command, say) is no wrong
  -- type: it is raised as it is, before the script writes anything.
  if not string.find(reply.err, 'WRONGTYPE', 1, true) then error(reply.err) end
  return true
end

-- Whether `key` holds a value of another type than `want` ('zset', 'hash', ...;
-- a missing key holds none, which is never wrong).
local function other_type(key, want)
  local t = redis.call('TYPE', key).ok
  return t ~= 'none' and t ~= want
end

-- The server's clock in whole microseconds.
local function now_us()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- How long a record of a clean release is kept (ms).
local RELEASED_KEEP_MS = 120000

-- The record of one clean release call of a Lock, FairLock or Semaphore: the
-- string key "<released>:<call id>" (the call id: 64 random bits, made with
-- the lease: one lease, one release call), set by that release for
-- RELEASED_KEEP_MS (one SET ... PX, the whole cost of the promise). A
-- release retried after its reply was lost finds it; a release by anyone
-- else (a forced release, another call with the token) does not; releases
-- by other holders meanwhile (a hand-off chain) never touch it. A release
-- with no id ("") records nothing.
local function release_noted(key, op)
  if op ~= '' then redis.call('SET', key, '1', 'PX', RELEASED_KEEP_MS) end
end

-- The reply to a release call `op` whose token does not hold the lock: OK,
-- as the first time, when this very call was recorded in `key` (a retry after
-- a lost reply, see release_noted), else NOT_OWNED.
local function release_unheld(key, op)
  if op ~= '' and redis.call('EXISTS', key) == 1 then return 0 end
  return {NOT_OWNED, 0}
end

-- The lock-delay of a lease of `lease` ms granted to `owner`: `key` held by
-- `owner` until `delay` ms after the lease would end. With no delay, a key left
-- by an earlier holder is removed when `delayed` (its PTTL, read before; -2
-- when there is none) is given and says there is one.
local function delay_after(key, owner, lease, delay, delayed)
  if delay > 0 then
    redis.call('SET', key, owner, 'PX', tonumber(lease) + delay)
  elseif delayed and delayed ~= -2 then
    redis.call('DEL', key)
  end
end

-- An owner as a caller names it: its owner id, or its owner id then ';' and
-- its holder label (see tenure._label; a label never holds ';'). Returns the
-- owner id alone.
local function bare_owner(owner)
  return string.match(owner, '^[^;]*')
end

-- Whether the field `field` of a reentrant lock's hash (the holder: its owner
-- id, or its owner id, ';' and its label) is owner `owner`'s (named as
-- bare_owner reads it).
local function owns(field, owner)
  local me = bare_owner(owner)
  return field == me or string.sub(field, 1, #me + 1) == me .. ';'
end

-- The field of the reentrant lock `key` (a hash with one field) that holds
-- owner `owner` and its hold count, or nil when the lock is free or another
-- owner's. `owner` names the field as the caller expects it (its owner id and
-- its label): one HGET finds it; a hold begun with another label (or none)
-- is found by the owner id in the hash's one field.
local function holder_field(key, owner)
  local count = redis.call('HGET', key, owner)
  if count then return owner, count end
  local fields = redis.call('HGETALL', key)
  if fields[1] and owns(fields[1], owner) then return fields[1], fields[2] end
  return nil
end

-- The fence a fence key's value `v` holds: the integer, or nil when `v` holds
-- none that a fence can follow (not a number, infinite, NaN, a fraction, or
-- 2^53 or more, beyond which the script's numbers can't add 1 exactly): a
-- fence key holding that is reported as a wrong type.
local function stored_fence(v)
  local n = tonumber(v)
  if n and n % 1 == 0 and n > -9007199254740992 and n < 9007199254740992 then
    return n
  end
  return nil
end

-- The fence after `last` (the fence key's value, or false when none is
-- stored), the server's clock `now` (µs, from TIME) read by the caller: the
-- larger of last + 1 and now. It increases
-- when the fence key is lost (expiry, a restart without persistence), and
-- across a failover to a replica that missed the last fences, as long as the
-- new master's clock is not behind the old one's by more than the time between
-- (docs/safety.md, "Clock jumps"; Kleppmann, "How to do distributed locking", 2016).
local function next_fence_at(last, now)
  if last and last + 0 >= now then return last + 1 end
  return now
end

-- next_fence_at(last, now) with the server's clock read here.
local function next_fence(last)
  return next_fence_at(last, now_us())
end

-- The fence a holder that asks again keeps (a retry after a lost reply, a
-- lost hand-off message): the fence key's value `n` (a stored fence, or nil
-- when none is stored), or, when the key lost it (gone, or below 0: a bare
-- negative reply reads as BUSY), a new fence, stored in `key` for `keep` ms.
local function kept_fence(key, n, keep)
  if n and n >= 0 then return n end
  n = next_fence(false)
  redis.call('SET', key, n, 'PX', keep)
  return n
end

-- PUBLISH `message` on a waiter's wake `channel`; returns how many heard it.
-- A channel the connected user may not publish to counts as heard by nobody
-- (0): the waiter is passed over as a gone one. The ACL guard checks up front
-- only the first two waiters' channels (acl_channels); a waiter further back
-- is told after writes were made, and a script never stops half-way.
local function tell(channel, message)
  local heard = redis.pcall('PUBLISH', channel, message)
  if type(heard) ~= 'number' then return 0 end
  return heard
end

-- Ask the waiter of queue member `head` (nil: nobody) to try again `ms`
-- milliseconds from now: "recheck <ms>" on its wake channel (wake_prefix ..
-- waiter id). Sent to the next waiter after every hand-off: the new holder has
-- only its claim window (`ms`) until it extends the lease, so if it stalled,
-- the next waiter takes the lock when the claim ends, not when its own timer
-- (the former holder's lease) runs out. Old hubs ignore the message.
local function recheck(wake_prefix, head, ms)
  local w = head and string.match(head, '^([^|]*)|')
  if w then tell(wake_prefix .. w, 'recheck ' .. ms) end
end

-- Hand the lock on to the first live waiter of `queue`, a sorted set of
-- "<waiter id>|<claim ms>|<token>" members, first served first: pop members
-- until one hears "<fence> <token>" on its wake channel (wake_prefix .. waiter
-- id; a member nobody hears is gone and is dropped), the fence minted after
-- `last`; then grant(token, claim ms, fence) gives it the lock with a lease of
-- its claim window (the waiter extends it to its full lease at once: a waiter
-- that stalled with its channel still open costs the others only that window),
-- and the next member is told to recheck when the window ends. `live(member)`,
-- when given, sees every popped member first and may drop it (false).
-- Returns whether the lock was handed on.
local function hand_off(queue, wake_prefix, last, grant, live)
  while true do
    local head = redis.call('ZPOPMIN', queue)[1]
    if not head then return false end
    local alive = (live == nil) or live(head)
    local w, claim, token = string.match(head, '^([^|]*)|(%d+)|(.+)$')
    if w and alive then
      local fence = string.format('%.0f', next_fence(last))
      if tell(wake_prefix .. w, fence .. ' ' .. token) > 0 then
        grant(token, claim, fence)
        recheck(wake_prefix, redis.call('ZRANGE', queue, 0, 0)[1], claim)
        return true
      end
    end
  end
end

-- Exact-key mode (a Lock on a key that foreign clients share): tell the first
-- live member of `queue` to try again `ms` milliseconds from now ("recheck
-- <ms>" on its wake channel), dropping members nobody hears (gone). Nothing is
-- handed over: the key is left free, for whoever sets it first. Stops at the
-- member `mine` (the caller's own, or nil). Another member of the caller's
-- waiter id is stale (a process queues one contender per lock) and is dropped
-- too: told, it would only wake the caller again. Returns whether a live
-- member (other than `mine`) was told.
local function wake_head(queue, wake_prefix, ms, mine)
  local me = mine and string.match(mine, '^([^|]*)|')
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head or head == mine then return false end
    local w = string.match(head, '^([^|]*)|')
    if w and w ~= me and tell(wake_prefix .. w, 'recheck ' .. ms) > 0 then
      return true
    end
    redis.call('ZREM', queue, head)
  end
end
