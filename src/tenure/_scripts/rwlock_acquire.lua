-- rwlock_acquire.lua: take a read-write lock's read or write lock for an owner,
-- enter it again, or claim a hold a release handed to the caller. A new hold
-- is taken in the queue's order: when anyone waits, the caller queues (a
-- reader behind a waiting writer too, so that writers are not starved), and a
-- release hands the lock on (see _rwlock.lua's promote and rwlock_release.lua).
--
-- KEYS[1..6]  lock, holds, fence, waiters, delay, last op keys (see _rwlock.lua)
-- ARGV[1]  owner         string; the caller's owner id
-- ARGV[2]  mode          "r" (read) or "w" (write)
-- ARGV[3]  lease         integer MILLISECONDS, > 0
-- ARGV[4]  member        the caller's waiters member (as KEYS[4]), or "" when not queued
-- ARGV[5]  fence ttl     integer MILLISECONDS the fence key outlives its last use
--                        (at least the lease)
-- ARGV[6]  lock-delay    integer MILLISECONDS, >= 0, for a write hold; 0 = none
-- ARGV[7]  op id         string, unique per acquire call, not empty; a new
--                        hold's id
-- ARGV[8]  wake prefix   string; waiter w is told by PUBLISH on ARGV[8] .. w
--
-- Returns  {1, {fence, hold id}}  OK: the caller holds the lock in this mode,
--                         and the hold's lease now ends ARGV[3] ms from now;
--                         the bare fence when the hold is new and its id
--                         ARGV[7] (the uncontended path: no table to send).
--                         - A new hold, count 1, id = ARGV[7]. A write hold's
--                           fence is minted: the larger of the last fence + 1
--                           and the server's TIME in µs. A read hold's fence is
--                           the last fence minted (one is minted if none is
--                           known).
--                         - The caller holds this mode already: count + 1, the
--                           hold's fence and id.
--                         - The caller holds the write lock and asks for the
--                           read lock: a new read hold at once, whoever waits,
--                           with the write hold's fence.
--                         - The hold's id is ARGV[7] (a release handed it to this
--                           call), or ARGV[7] is the owner's last op (a retry of
--                           a call that was applied): nothing is counted.
--          {2, pttl_ms}   BUSY: pttl_ms = when the lock's last hold (or a dead
--                         writer's lock-delay) ends, -2 when unknown. ARGV[4],
--                         if given, is queued (or keeps its place).
--          {3, 0}         OWNED_BY_CALLER: the caller holds the read lock (and
--                         not the write lock) and asked for the write lock: an
--                         upgrade, refused. ARGV[4], if given, left the queue.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

-- The uncontended path: a new hold for an owner that holds neither mode, by an
-- attempt that does not queue (ARGV[4] = ""), while nobody is queued, no hold
-- has expired and the lock is free for mode m (no lock-delay; for a writer no
-- hold at all, for a reader no write hold). Its reply is the one the general
-- path below would give, but for the owner's last-op key (KEYS[6]), which it
-- does not touch and whose type it does not check: the new hold's id is the
-- call's op id, by which a retry of the call and a waiter leaving recognise
-- what it did (the general path notes the op all the same). Any other case
-- (or a key it touches holding another type) writes nothing and goes on
-- (`break`) to the general path, which decides. It reads the clock once (the
-- hold's deadline, a writer's fence), and checks with the ACL guard only the
-- commands it may run after its first write. It calls no helper (the fence
-- rule's and delay_after's steps are written out): each Lua call costs the
-- server about 0.1-0.4 µs (a C one such as tonumber or math.floor too; the
-- arithmetic here is the VM's own), and a script's chunk makes every
-- function it defines at every call (_rwlock.lua and the helpers of
-- _common.lua are defined below, at the `later` line:
-- tenure._scripts.deferred).
--
-- Relies on two invariants every script keeps: the lock hash has its "mode"
-- field while it exists (a hold is never written without it), and the holds
-- key has a member per hold field of the lock hash, and no other.
if ARGV[4] == '' then repeat
  local owner, m, lease, op = ARGV[1], ARGV[2], ARGV[3] + 0, ARGV[7]
  local lock, holds, fence_key = KEYS[1], KEYS[2], KEYS[3]
  local mode, held = false, 0
  -- (no hold, nobody queued, no lock-delay key: one read)
  if redis.pcall('EXISTS', lock, holds, KEYS[4], KEYS[5]) ~= 0 then
    local fields = redis.pcall('HMGET', lock, 'mode', 'r:' .. owner, 'w:' .. owner)
    if fields.err or fields[2] or fields[3] then break end  -- (a re-entry, an upgrade, a write holder's read)
    mode = fields[1]
    if mode == 'write' or (m == 'w' and mode) then break end
    if redis.pcall('ZCARD', KEYS[4]) ~= 0 then break end
    held = redis.pcall('ZCARD', holds)
    if type(held) ~= 'number' or (held > 0) ~= (mode ~= false) then break end
    if redis.call('PTTL', KEYS[5]) > 0 then break end  -- a dead writer's lock-delay
  end
  local last = redis.pcall('GET', fence_key)
--@include _fence_last.lua
  local lastn = n
  local time = redis.call('TIME')
  local us = time[1] * 1000000 + time[2]
  local now = (us - us % 1000) / 1000
  local latest = now + lease  -- when the lock's last hold ends, this one counted
  if held > 0 then  -- other readers hold
    if redis.call('ZRANGE', holds, 0, 0, 'WITHSCORES')[2] + 0 <= now then break end
    local last_end = redis.call('ZRANGE', holds, -1, -1, 'WITHSCORES')[2] + 0
    if last_end > latest then latest = last_end end
  end
  local keep = ARGV[5] + 0
  if keep < lease then keep = lease end
  local field = m .. ':' .. owner
  local fence, value
  -- The first write is the fence key's: a SET (a writer's fence, minted; a
  -- reader's when none is known, or below 0: no fence a bare reply can carry)
  -- or a PEXPIREAT (a reader's, the last one). What runs after it is checked
  -- now. Redis 6.2 checks no command up front: there, for a first hold
  -- (held == 0: the lock is missing), the lock's PEXPIREAT runs first, which
  -- writes nothing, so that a refusal leaves no hold without expiry (readers'
  -- lock has its expiry). Nothing is written before the last `break`.
  local check = redis.acl_check_cmd
  if m == 'w' or not last or lastn < 0 then
    if check then
      local refused = (not check('HSET', lock) and 'HSET') or (not check('ZADD', lock) and 'ZADD')
        or (not check('PEXPIREAT', lock) and 'PEXPIREAT')
      if refused then return {DENIED, {'command', refused}} end
    elseif held == 0 then
      redis.call('PEXPIREAT', lock, latest)
    end
    -- (a fence from the clock is written as TIME's two numbers, the µs
    -- padded to six digits: no string.format)
    fence = us  -- (next_fence_at's rule)
    if lastn and lastn >= us then fence = lastn + 1 end
    local digits
    if fence == us then
      local micros = time[2]
      if #micros < 6 then micros = string.rep('0', 6 - #micros) .. micros end
      digits = time[1] .. micros
    else
      digits = string.format('%.0f', fence)
    end
    redis.call('SET', fence_key, digits, 'PX', keep)
    value = '1|' .. digits .. '|' .. op
  else
    -- (the hold stores the fence as the key's text: digits, as tenure writes
    -- them; a number another client wrote in another form, "7.0" or " 7",
    -- is left to the general path, which writes it as digits)
    if not string.find(last, '^[1-9]%d*$') then break end
    if check then
      local refused = (not check('HSET', lock) and 'HSET') or (not check('ZADD', lock) and 'ZADD')
      if refused then return {DENIED, {'command', refused}} end
    elseif held == 0 then
      redis.call('PEXPIREAT', lock, latest)
    end
    redis.call('PEXPIREAT', fence_key, now + keep)
    fence, value = lastn, '1|' .. last .. '|' .. op
  end
  if held == 0 then
    redis.call('HSET', lock, field, value, 'mode', m == 'w' and 'write' or 'read')
  else
    redis.call('HSET', lock, field, value)
  end
  redis.call('ZADD', holds, now + lease, field)
  if m == 'w' and ARGV[6] + 0 > 0 then  -- (delay_after's)
    redis.call('SET', KEYS[5], owner, 'PX', lease + ARGV[6])
  end
  redis.call('PEXPIREAT', lock, latest)
  redis.call('PEXPIREAT', holds, latest)
  return fence  -- (a new hold: its id is the op)
until true end

--@later
--@include _rwlock.lua

-- A caller that queues itself must be one a release can tell: its own channel too.
local own = ARGV[4] ~= '' and (ARGV[8] .. string.match(ARGV[4], '^([^|]*)')) or nil
local denied = acl_denied(own, KEYS[4], ARGV[8])
if denied then return {DENIED, denied} end

local bad = rw_open_op(tonumber(ARGV[5]))
if bad then return {WRONG_TYPE, bad} end
local lastop = F.op

local owner, m, lease, member = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local delay, op, prefix = tonumber(ARGV[6]), ARGV[7], ARGV[8]
local field = m .. ':' .. owner
local now = now_ms()
-- Redis 6.2 checks no command up front: settle()'s PEXPIREAT runs first there,
-- on a missing lock (it writes nothing), so that a refusal leaves no new hold
-- without expiry (a lock that exists has its expiry)
if not redis.acl_check_cmd and redis.call('EXISTS', LOCK) == 0 then
  redis.call('PEXPIREAT', LOCK, now)
end
prune(now)

local function note()
  redis.call('SET', KEYS[6], op .. '|+' .. m, 'PX', 120000)
end

local mine = hold(field)
if mine then
  if mine.id ~= op and lastop ~= op .. '|+' .. m then
    put(field, mine.count + 1, mine.fence, mine.id)
    note()
  end
  redis.call('ZADD', HOLDS, now + lease, field)
  if m == 'w' then delay_after(DELAY, owner, lease, delay) end
  keep_fence(lease)
  if member ~= '' then redis.call('ZREM', WAITERS, member) end
  promote(now, prefix, delay, '')
  settle()
  return {OK, {tonumber(mine.fence), mine.id}}
end

if m == 'w' and hold('r:' .. owner) then
  if member ~= '' then redis.call('ZREM', WAITERS, member) end
  promote(now, prefix, delay, '')
  settle()
  return {OWNED_BY_CALLER, 0}
end

if m == 'r' then
  local writing = hold('w:' .. owner)
  if writing then
    if member ~= '' then redis.call('ZREM', WAITERS, member) end
    begin('r', owner, lease, writing.fence, op, now, delay)
    note()
    settle()
    return {OK, {tonumber(writing.fence), op}}
  end
end

-- A new hold, in the queue's order.
if member ~= '' then redis.call('ZADD', WAITERS, 'NX', now_us(), member) end
local got = promote(now, prefix, delay, member, lease)
if not got and member == '' and redis.call('ZCARD', WAITERS) == 0 and free_for(m) then
  local fence = fence_for(m)
  begin(m, owner, lease, fence, op, now, delay)
  got = {tonumber(fence), op}
end
if got then
  note()
  settle()
  return {OK, got}
end

settle()
local pttl = redis.call('PTTL', LOCK)
local guard = delayed()
if guard > 0 and guard > pttl then pttl = guard end
if member ~= '' then redis.call('PEXPIRE', WAITERS, math.max(pttl, 0) + 60000) end
return {BUSY, pttl}
