-- rwlock_extend.lua: reset a read or write hold's lease to end ARGV[4] ms from
-- now (the whole hold: every level of it).
--
-- KEYS[1..5]  lock, holds, fence, waiters, delay keys (see _rwlock.lua)
-- ARGV[1]  owner         string; the holding owner id
-- ARGV[2]  mode          "r" (read) or "w" (write)
-- ARGV[3]  hold id       the hold's id
-- ARGV[4]  lease         integer MILLISECONDS, > 0
-- ARGV[5]  fence ttl     integer MILLISECONDS the fence key outlives its last use
-- ARGV[6]  least left    integer MILLISECONDS, >= 0: refuse when the hold has
--                        less than this left (the holder's clock has given it
--                        up by then; a late renewal must not revive it)
-- ARGV[7]  lock-delay    integer MILLISECONDS, >= 0, for a write hold; 0 = none
--
-- Returns  {1, count}    OK: the hold's lease now ends ARGV[4] ms from now;
--                        count = its hold count.
--          {4, late}     NOT_OWNED: the owner holds no such hold, or its hold
--                        has another id, or its expiry has passed (late = 0);
--                        or less than ARGV[6] ms were left (late = 1).
--          {5, key}      WRONG_TYPE: key holds a value of another type.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

-- The usual path: a live hold ARGV[3] with at least ARGV[6] ms left. Its reply
-- is the one the general path below would give, but for the waiters key,
-- which it does not touch and whose type it does not check; any other case
-- (or a key it touches holding another type) returns nil having written
-- nothing, and the general path decides. It checks with the ACL guard only
-- the commands it may run after its first write (the hold's ZADD), and comes
-- before _rwlock.lua, whose helpers only the general path makes (a script's
-- chunk makes every function it defines at every call).
local function fast_extend(owner, m, id, lease, fence_ttl, least, delay)
  local lock, holds, field = KEYS[1], KEYS[2], m .. ':' .. owner
  local value = redis.pcall('HGET', lock, field)
  if type(value) ~= 'string' then return nil end
  local count, hold_id = string.match(value, '^(%d+)|%d+|(.*)$')
  if hold_id ~= id then return nil end
  local expiry = redis.pcall('ZSCORE', holds, field)
  if type(expiry) ~= 'string' then return nil end
  local last = redis.pcall('GET', KEYS[3])
  if type(last) == 'table' or (last and not stored_fence(last)) then return nil end
  local now = math.floor(now_us() / 1000)
  expiry = tonumber(expiry)
  if expiry <= now or expiry - now < least then return nil end  -- (NOT_OWNED)
  local needed = {'ZRANGE', 'PEXPIREAT'}
  if last then needed[#needed + 1] = 'PEXPIRE' end
  if m == 'w' and delay > 0 then needed[#needed + 1] = 'SET' end
  local denied = acl_need(needed)
  if denied then return {DENIED, denied} end
  redis.call('ZADD', holds, now + lease, field)
  if m == 'w' then delay_after(KEYS[5], owner, lease, delay) end
  if last then redis.call('PEXPIRE', KEYS[3], math.max(fence_ttl, lease)) end
  -- the two keys expire with the latest hold
  local latest = redis.call('ZRANGE', holds, -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', lock, latest)
  redis.call('PEXPIREAT', holds, latest)
  return {OK, tonumber(count)}
end

do
  local reply = fast_extend(ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]),
    tonumber(ARGV[6]), tonumber(ARGV[7]))
  if reply then return reply end
end

--@include _rwlock.lua

local denied = acl_commands()
if denied then return {DENIED, denied} end

local bad = rw_open(tonumber(ARGV[5]))
if bad then return {WRONG_TYPE, bad} end
local owner, m, lease = ARGV[1], ARGV[2], tonumber(ARGV[4])
local field = m .. ':' .. owner
local h = hold(field)
if not h or h.id ~= ARGV[3] then return {NOT_OWNED, 0} end
local expiry = tonumber(redis.call('ZSCORE', HOLDS, field))
local now = now_ms()
if not expiry or expiry <= now then return {NOT_OWNED, 0} end
if expiry - now < tonumber(ARGV[6]) then return {NOT_OWNED, 1} end
redis.call('ZADD', HOLDS, now + lease, field)
if m == 'w' then delay_after(DELAY, owner, lease, tonumber(ARGV[7])) end
keep_fence(lease)
settle()
return {OK, h.count}
