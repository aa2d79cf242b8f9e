-- rlock_release.lua: leave one level of a reentrant hold. When the count reaches
-- 0 the lock is deleted and handed straight to the first live waiter, as
-- lock_release.lua does: the lock becomes {<the waiter's owner id>: 1} with a
-- lease of the waiter's claim window, a fence is minted for it, "<fence> <owner
-- id>" is published on the waiter's wake channel, and the next waiter is told
-- "recheck <claim ms>" (see _common.lua, hand_off). Also used by a waiter that
-- gives up, to leave the queue and give back a hold handed to it, in the same
-- call.
--
-- KEYS[1]  lock key      hash {<owner id>: <hold count>} (see rlock_acquire.lua)
-- KEYS[2]  waiters key   sorted set, score = arrival, member =
--                        "<waiter id>|<claim ms>|<owner id>" (see rlock_acquire.lua)
-- KEYS[3]  fence key     string holding an integer: the last fence minted
-- ARGV[1]  owner         string; the releasing owner id, then ';' and its label
--                        (the field it expects; its hold is found by its owner id)
-- ARGV[2]  fence         the hold's fence (decimal), or "" for whatever hold the
--                        owner has (a waiter leaving, which never saw its fence)
-- ARGV[3]  wake prefix   string; waiter w is told by PUBLISH on ARGV[3] .. w
-- ARGV[4]  fence ttl     integer MILLISECONDS the fence key outlives its last use
-- KEYS[4]  delay key     string: the lock-delay guard (see rlock_acquire.lua);
--                        deleted at count 0, set for the waiter handed the lock
-- KEYS[5]  last op key   string "<owner id>|<op id>" (see rlock_acquire.lua)
-- ARGV[5]  member        a waiters member to remove first (a waiter leaving), or ""
-- ARGV[6]  lock-delay    integer MILLISECONDS, >= 0, for the waiter handed the lock
-- ARGV[7]  op id         string, unique per release call ("" for a waiter leaving)
-- ARGV[8]  undone op     (optional) the op id of an acquire call of this owner
--                        whose reply was lost (an interrupt, a cut connection):
--                        the call counts down only if that acquire is the last
--                        op (it was applied, and nothing changed since), so it
--                        never counts down a hold the owner had before it
--
-- Returns  count         OK: the owner's hold count is now count. At 0 the lock
--                        was handed to the first live waiter, or is free when
--                        nobody waits. A waiter whose PUBLISH reaches no
--                        subscriber is gone: dropped. If ARGV[7] is the last
--                        op, the call is a retry of one that was applied:
--                        nothing changes and count is the count now.
--          {4, 0}        NOT_OWNED: the owner holds no count, or its hold has
--                        another fence than ARGV[2] (the lease expired and a new
--                        hold began), or ARGV[8] is given and is not the last op
--                        (that acquire was not applied); only ARGV[5] was removed.
--          {5, key}      WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua

-- The release of the caller's hold (its field as named, its fence) with
-- nobody queued, no member to drop, no undone op, and no retry, first, and
-- written out here with no helper (as lock_release.lua's): the helpers of
-- _acl.lua and _common.lua (put above) are defined below, at the `later`
-- line. It reads first (the queue, the count, the fence key, the last op);
-- its first write is the count's HINCRBY (or, at the last level, the op's
-- SET), after which it runs only SET and DEL: those are checked first (as
-- acl_need does). Its reply and writes are the whole script's for that
-- case. Anything else (waiters, a field of another label, a retry, a
-- refusal, a key of another type) goes on to the whole script, which says so.
local waiting = redis.pcall('ZCARD', KEYS[2])  -- (a read: a refusal writes nothing)
if waiting == 0 and ARGV[5] == '' and ARGV[7] ~= '' and (ARGV[8] or '') == '' then repeat
  local check = redis.acl_check_cmd
  if check and not (check('SET', KEYS[1]) and check('DEL', KEYS[1])) then break end
  local count = redis.pcall('HGET', KEYS[1], ARGV[1])
  if not count or count.err then break end
  local last = redis.pcall('GET', KEYS[3])
--@include _fence_last.lua
  if ARGV[2] ~= '' and n and n ~= tonumber(ARGV[2]) then break end
  local op = ARGV[1] .. '|' .. ARGV[7]
  if redis.call('GET', KEYS[5]) == op then break end
  local left = 0
  if count ~= '1' then left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1) end
  redis.call('SET', KEYS[5], op, 'PX', 120000)
  if left > 0 then return left end
  redis.call('DEL', KEYS[1], KEYS[4])
  return 0
until true end

--@later
--@include _acl.lua

if wrong(waiting) then return {WRONG_TYPE, KEYS[2]} end
local denied
if waiting == 0 and ARGV[5] == '' then
  -- A release with nobody queued and no member to drop writes first the
  -- count's HINCRBY; after it, it may only run SET and DEL: those are checked
  -- now, and nothing else it could never run on this path.
  denied = acl_need({'SET', 'DEL'})
else
  denied = acl_denied(nil, KEYS[2], ARGV[3])
end
if denied then return {DENIED, denied} end

if other_type(KEYS[1], 'hash') then return {WRONG_TYPE, KEYS[1]} end
local last = redis.pcall('GET', KEYS[3])
if wrong(last) or (last and not stored_fence(last)) then return {WRONG_TYPE, KEYS[3]} end

if ARGV[5] ~= '' then waiting = waiting - redis.call('ZREM', KEYS[2], ARGV[5]) end
local op = ARGV[1] .. '|' .. ARGV[7]
local field, held = holder_field(KEYS[1], ARGV[1])
if ARGV[7] ~= '' and redis.call('GET', KEYS[5]) == op then
  return tonumber(held or 0)
end
if ARGV[8] and ARGV[8] ~= '' and redis.call('GET', KEYS[5]) ~= ARGV[1] .. '|' .. ARGV[8] then
  return {NOT_OWNED, 0}
end
if not field then return {NOT_OWNED, 0} end
-- A missing fence key means none was minted since this hold began (a fence is
-- minted for every new hold), so the hold is still the same.
if ARGV[2] ~= '' and last and tonumber(last) ~= tonumber(ARGV[2]) then return {NOT_OWNED, 0} end

local count = redis.call('HINCRBY', KEYS[1], field, -1)
if ARGV[7] ~= '' then redis.call('SET', KEYS[5], op, 'PX', 120000) end
if count > 0 then return count end
redis.call('DEL', KEYS[1], KEYS[4])

local delay = tonumber(ARGV[6])
local function grant(owner, lease, fence)
  redis.call('HSET', KEYS[1], owner, 1)
  redis.call('PEXPIRE', KEYS[1], lease)
  redis.call('SET', KEYS[3], fence, 'PX', math.max(tonumber(ARGV[4]), tonumber(lease)))
  delay_after(KEYS[4], owner, lease, delay)
end
if waiting > 0 then hand_off(KEYS[2], ARGV[3], last, grant) end
return 0
