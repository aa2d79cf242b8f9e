-- semaphore_inspect.lua: read-only snapshot of a semaphore.
--
-- KEYS[1]  holders key   sorted set, a member "<token>#<i>" per held permit,
--                        score = expiry (server ms) (see _semaphore.lua)
-- KEYS[2]  permits key   string holding an integer: the permit count
-- KEYS[3]  fence key     string holding an integer: the last fence minted
-- KEYS[4]  waiters key   sorted set of waiters (see _semaphore.lua)
--
-- Returns  {1, {permits, waiters, holders}}
--            permits  integer, the stored permit count (0 when none is stored)
--            waiters  integer, the number of queued waiters
--            holders  flat list {member, pttl_ms, ...} of the permits not yet
--                     expired, first to expire first; member = "<token>#<i>"
--          {5, key}   WRONG_TYPE: key holds a value of another type.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _permits.lua
--@include _semaphore.lua
--@include _acl.lua

local denied = acl_commands()
if denied then return {DENIED, denied} end

local bad = sem_wrong_key()
if bad then return {WRONG_TYPE, bad} end
local s = sem_open(0)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', s.now_ms), '+inf',
                        'WITHSCORES')
local holders = {}
for i = 1, #live, 2 do
  holders[#holders + 1] = live[i]
  holders[#holders + 1] = tonumber(live[i + 1]) - s.now_ms
end
return {OK, {s.stored or 0, redis.call('ZCARD', KEYS[4]), holders}}
