-- rwlock_release.lua: leave one level of a read or write hold. At count 0 the
-- hold ends, and the lock is handed to the head of the queue while the head
-- may have it (a writer alone, or readers up to the next writer; see
-- _rwlock.lua's promote). Releasing the write hold while holding the read lock
-- is a downgrade: the read hold stays, and waiting readers come in with it.
-- Also used by a waiter that gives up, to leave the queue and give back what
-- its acquire got (a hold handed to it, or a count an acquire whose reply was
-- lost made), in the same call.
--
-- KEYS[1..6]  lock, holds, fence, waiters, delay, last op keys (see _rwlock.lua)
-- ARGV[1]  owner         string; the releasing owner id
-- ARGV[2]  mode          "r" (read) or "w" (write)
-- ARGV[3]  hold id       the hold's id, or "" for a waiter leaving
-- ARGV[4]  wake prefix   string; waiter w is told by PUBLISH on ARGV[4] .. w
-- ARGV[5]  fence ttl     integer MILLISECONDS the fence key outlives its last use
-- ARGV[6]  member        a waiters member to remove first (a waiter leaving), or ""
-- ARGV[7]  op id         string, unique per release call; for a waiter leaving,
--                        the op id of its acquire (whose doing is undone)
-- ARGV[8]  lock-delay    integer MILLISECONDS, >= 0, for a writer handed the lock
--
-- Returns  count         OK: the owner's hold count in this mode is now count
--                        (at 0 the hold ended). A waiter leaving gives back one
--                        count of the hold whose id is ARGV[7], or that ARGV[7]
--                        counted (the owner's last op), if any. If ARGV[7] is
--                        the owner's last op and a release, the call is a retry
--                        of one that was applied: nothing changes.
--          {4, 0}        NOT_OWNED: the owner holds no such hold, or its hold
--                        has another id (the lease expired and a new hold
--                        began); only ARGV[6] was removed.
--          {5, key}      WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

-- The uncontended path: a release of the hold ARGV[3] (not a waiter leaving)
-- when it is the lock's only hold, it has not expired and nobody is queued,
-- and the call is no retry. Its reply is the one the general path below would
-- give, but for the fence key, which it does not touch and whose type it does
-- not check; any other case (or a key it touches holding another type) writes
-- nothing and goes on (`break`) to the general path, which decides. It checks
-- with the ACL guard only the commands it may run after its first write, and
-- is written out with no helper (as rwlock_acquire.lua's: each Lua call costs
-- the server, and a chunk makes every function it defines at every call).
--
-- At count 1 the hold's end is the last-op record's SET ... GET, its first
-- write: the value it had says whether the call is a retry (a retry after
-- its reply was lost finds the hold gone, as the hold's id is the op of the
-- acquire that began it: so this one never is, but an acquire replayed after
-- the release; the general path then says so, the record kept as it was but
-- for its expiry), and a key of another type fails it with nothing written.
if ARGV[6] == '' and ARGV[3] ~= '' then repeat
  local owner, m, id, op = ARGV[1], ARGV[2], ARGV[3], ARGV[7]
  if redis.pcall('ZCARD', KEYS[4]) ~= 0 then break end  -- (first: the common contended case)
  local lock, field = KEYS[1], m .. ':' .. owner
  local value = redis.pcall('HGET', lock, field)
  if not value or value.err then break end  -- (a string has no err field)
  local count, fence, hold_id = string.match(value, '^(%d+)|(%d+)|(.*)$')
  if hold_id ~= id then break end
  local holds = redis.pcall('ZRANGE', KEYS[2], 0, 1, 'WITHSCORES')  -- (this hold alone, or more)
  if holds.err or #holds ~= 2 or holds[1] ~= field then break end
  local time = redis.call('TIME')
  if holds[2] + 0 <= time[1] * 1000 + time[2] / 1000 then break end  -- (expired: a whole ms)
  local record = op .. '|-' .. m
  local check = redis.acl_check_cmd
  count = count - 1
  if count <= 0 and check then  -- (the hold's end, its first write the record's SET ... GET)
    if not check('DEL', lock) then return {DENIED, {'command', 'DEL'}} end
    local was = redis.pcall('SET', KEYS[6], record, 'PX', 120000, 'GET')
    if was and was.err or was == record then break end  -- (another type; a retry)
  else
    -- (and on Redis 6.2, which checks no command up front, the record is
    -- written after the hold's own write, so that a refused one writes nothing)
    local lastop = redis.pcall('GET', KEYS[6])
    if lastop and lastop.err or lastop == record then break end
    if check and not check('SET', lock) then return {DENIED, {'command', 'SET'}} end
  end
  if count > 0 then
    redis.call('HSET', lock, field, string.format('%d|%s|%s', count, fence, hold_id))
  elseif m == 'w' then
    redis.call('DEL', lock, KEYS[2], KEYS[5])
  else
    redis.call('DEL', lock, KEYS[2])
  end
  if count > 0 or not check then redis.call('SET', KEYS[6], record, 'PX', 120000) end
  return count
until true end

--@later
--@include _rwlock.lua

local denied = acl_denied(nil, KEYS[4], ARGV[4])
if denied then return {DENIED, denied} end

local bad = rw_open_op(tonumber(ARGV[5]))
if bad then return {WRONG_TYPE, bad} end
local lastop = F.op

local owner, m, id, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local member, op, delay = ARGV[6], ARGV[7], tonumber(ARGV[8])
local field = m .. ':' .. owner
local now = now_ms()
prune(now)
if member ~= '' then redis.call('ZREM', WAITERS, member) end

local h = hold(field)
local count = h and h.count or 0
local status = OK
if id == '' then
  if not (h and (h.id == op or lastop == op .. '|+' .. m)) then h = nil end
elseif lastop == op .. '|-' .. m then
  h = nil -- a retry
elseif not h or h.id ~= id then
  h, status = nil, NOT_OWNED
end

if h then
  count = h.count - 1
  if count > 0 then
    put(field, count, h.fence, h.id)
  else
    drop(field)
    if m == 'w' then redis.call('DEL', DELAY) end
  end
  redis.call('SET', KEYS[6], op .. '|-' .. m, 'PX', 120000)
end
promote(now, prefix, delay, '')
settle()
if status == NOT_OWNED then return {NOT_OWNED, 0} end
return count
