-- fair_release.lua: compare-and-delete release of a fair lock, then hand the
-- lock straight to the head of the queue (the earliest live waiter): the lock
-- is set to that waiter's token with a lease of its claim window, a fence is
-- minted for it, and "<fence> <token>" is published on its own wake channel;
-- the next waiter is told "recheck <claim ms>" (see _common.lua, hand_off).
-- Only those two are told; a head whose deadline has passed, or whose PUBLISH
-- reaches no subscriber (its process is gone), is dropped and the next one is
-- tried.
-- Also used by a waiter that gives up, to leave the queue in the same call.
--
-- KEYS[1]  lock key       string; value = the holder's owner token
-- KEYS[2]  waiters key    sorted set, the queue (see fair_acquire.lua)
-- KEYS[3]  deadlines key  sorted set, each member's deadline (server ms)
-- KEYS[4]  fence key      string holding an integer: the last fence minted
-- KEYS[5]  delay key      string: the lock-delay guard; a clean release deletes it
-- KEYS[6]  record key     string "<released>:<ARGV[6]>": set for 120 s by the
--                         clean release of that call (see release_noted in
--                         _common.lua), so that the same call retried after a
--                         lost reply is recognised (and no other call with the
--                         token); unused when ARGV[6] is ""
-- ARGV[1]  token          string; the releasing lease's owner token
-- ARGV[2]  wake prefix    string; waiter w is told by PUBLISH on ARGV[2] .. w
-- ARGV[3]  fence ttl      integer MILLISECONDS the fence key outlives its last use
-- ARGV[4]  member         a member to remove from the queue first (a waiter leaving), or ""
-- ARGV[5]  lock-delay     integer MILLISECONDS, >= 0, for the waiter handed the lock
-- ARGV[6]  op             string; this release call's id (a retry of the call
--                         sends the same), or "" for a release never retried
--
-- Returns  handed         OK: released; handed = 1 if a live waiter now holds the
--                         lock, 0 if nobody waits (the lock is free), or if this
--                         token's release had already been done (a retry).
--          {4, 0}         NOT_OWNED: the lock is not held with this token
--                         (expired, or another owner's); only ARGV[4] was removed.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua

-- The release with nobody queued, no deadline kept and no member to drop
-- (then GET of the holder and the fence key, SET of the record, DEL),
-- first, and written out here with no helper, as lock_release.lua's: its
-- first write is the record's SET (or, with no record, its DEL); after it,
-- it may only run DEL, which is checked first (as acl_need does). Anything
-- else (waiters, a lock not held with this token, a refusal, a key of
-- another type) goes on to the whole script, which says so.
if ARGV[4] == '' and redis.pcall('EXISTS', KEYS[2], KEYS[3]) == 0 then repeat
  local check = redis.acl_check_cmd
  if check and not check('DEL', KEYS[1]) or redis.pcall('GET', KEYS[1]) ~= ARGV[1] then break end
  local last = redis.pcall('GET', KEYS[4])
--@include _fence_last.lua
  if ARGV[6] ~= '' then redis.call('SET', KEYS[6], '1', 'PX', RELEASED_KEEP_MS) end
  redis.call('DEL', KEYS[1], KEYS[5])
  return 0
until true end

--@later
--@include _acl.lua

local waiting = redis.pcall('ZCARD', KEYS[2])  -- (a read: a refusal writes nothing)
if wrong(waiting) then return {WRONG_TYPE, KEYS[2]} end
local denied
if waiting == 0 and ARGV[4] == '' then
  -- A release with nobody queued and no member to drop writes first the
  -- lock's DEL; after it, it may only run SET (the record): checked now, and
  -- nothing else it could never run on this path.
  denied = acl_need({'SET'})
else
  denied = acl_denied(nil, KEYS[2], ARGV[2])
end
if denied then return {DENIED, denied} end

local holder = redis.pcall('GET', KEYS[1])
if wrong(holder) then return {WRONG_TYPE, KEYS[1]} end
if other_type(KEYS[3], 'zset') then return {WRONG_TYPE, KEYS[3]} end
local last = redis.pcall('GET', KEYS[4])
if wrong(last) or (last and not stored_fence(last)) then return {WRONG_TYPE, KEYS[4]} end

if ARGV[4] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('ZREM', KEYS[3], ARGV[4])
end
if holder ~= ARGV[1] then return release_unheld(KEYS[6], ARGV[6]) end
redis.call('DEL', KEYS[1], KEYS[5])
release_noted(KEYS[6], ARGV[6])
if waiting == 0 then return 0 end  -- nobody to hand the lock to

local now_ms = math.floor(now_us() / 1000)
local delay = tonumber(ARGV[5])
-- a waiter whose deadline has passed is dropped, with its deadline
local function live(head)
  local deadline = tonumber(redis.call('ZSCORE', KEYS[3], head))
  redis.call('ZREM', KEYS[3], head)
  return deadline ~= nil and deadline > now_ms
end
local function grant(token, lease, fence)
  redis.call('SET', KEYS[1], token, 'PX', lease)
  redis.call('SET', KEYS[4], fence, 'PX', ARGV[3])
  delay_after(KEYS[5], token, lease, delay)
end
if hand_off(KEYS[2], ARGV[2], last, grant, live) then return 1 end
return 0
