-- rlock_extend.lua: reset a reentrant hold's lease to end ARGV[3] ms from now
-- (the whole hold: every level of it).
--
-- KEYS[1]  lock key      hash {<owner id>: <hold count>} (see rlock_acquire.lua)
-- KEYS[2]  fence key     string holding an integer: the last fence minted
-- KEYS[3]  delay key     string: the lock-delay guard (see rlock_acquire.lua)
-- ARGV[1]  owner         string; the holding owner id, then ';' and its label
--                        (the field it expects; its hold is found by its owner id)
-- ARGV[2]  fence         the hold's fence (decimal)
-- ARGV[3]  lease         integer MILLISECONDS, > 0
-- ARGV[4]  fence ttl     integer MILLISECONDS the fence key outlives its last use
-- ARGV[5]  least left    integer MILLISECONDS, >= 0: refuse when the lease has
--                        less than this left (the holder's clock has given it
--                        up by then; a late renewal must not revive it)
-- ARGV[6]  lock-delay    integer MILLISECONDS, >= 0; 0 = no lock-delay
--
-- Returns  count         OK: the lease now ends ARGV[3] ms from now; count = the
--                        owner's hold count.
--          {4, late}     NOT_OWNED: the owner holds no count, or its hold has
--                        another fence (expired, and a new hold began; late =
--                        0), or less than ARGV[5] ms were left (late = 1).
--          {5, key}      WRONG_TYPE: key holds a value of another type.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

local denied = acl_commands()
if denied then return {DENIED, denied} end

if other_type(KEYS[1], 'hash') then return {WRONG_TYPE, KEYS[1]} end
local last = redis.pcall('GET', KEYS[2])
if wrong(last) then return {WRONG_TYPE, KEYS[2]} end
if last and not stored_fence(last) then return {WRONG_TYPE, KEYS[2]} end
local field, count = holder_field(KEYS[1], ARGV[1])
if not field then return {NOT_OWNED, 0} end
if last and tonumber(last) ~= tonumber(ARGV[2]) then return {NOT_OWNED, 0} end
local left = redis.call('PTTL', KEYS[1])
if left >= 0 and left < tonumber(ARGV[5]) then return {NOT_OWNED, 1} end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
delay_after(KEYS[3], ARGV[1], ARGV[3], tonumber(ARGV[6]))
if last then redis.call('PEXPIRE', KEYS[2], math.max(tonumber(ARGV[4]), tonumber(ARGV[3]))) end
return tonumber(count)
