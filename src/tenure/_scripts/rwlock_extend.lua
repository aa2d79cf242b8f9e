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
--@include _rwlock.lua
--@include _acl.lua

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
