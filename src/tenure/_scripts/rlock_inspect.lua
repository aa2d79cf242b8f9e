-- rlock_inspect.lua: read-only snapshot of a reentrant lock.
--
-- KEYS[1]  lock key      hash {<owner id>: <hold count>} (see rlock_acquire.lua)
-- KEYS[2]  fence key     string holding an integer
-- KEYS[3]  waiters key   sorted set of waiters
-- ARGV[1]  owner         string; the owner id asking (its count is returned), or ""
--
-- Returns  {1, {holder, count, pttl_ms, fence, waiters, mine}}
--            holder   string, the holding owner id (then ';' and its label,
--                     when it has one); "" when free
--            count    integer, the holder's hold count (0 when free)
--            pttl_ms  integer; -2 when free, -1 when held with no expiry
--            fence    integer, the last fence minted (0 if none is known)
--            waiters  integer, the number of queued waiters
--            mine     integer, ARGV[1]'s hold count (0 when it holds none)
--          {5, key}   WRONG_TYPE: key holds a value of another type.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

local denied = acl_commands()
if denied then return {DENIED, denied} end

if other_type(KEYS[1], 'hash') then return {WRONG_TYPE, KEYS[1]} end
local fence = redis.pcall('GET', KEYS[2])
-- (a value no fence is, such as an integer beyond 2^53, is another type too,
-- as the acquire says)
if wrong(fence) or (fence and not stored_fence(fence)) then return {WRONG_TYPE, KEYS[2]} end
if other_type(KEYS[3], 'zset') then return {WRONG_TYPE, KEYS[3]} end
local holder, count = '', 0
local fields = redis.call('HGETALL', KEYS[1])
if #fields > 0 then holder, count = fields[1], tonumber(fields[2]) or 0 end
local mine = 0
if ARGV[1] ~= '' and holder ~= '' and owns(holder, ARGV[1]) then mine = count end
return {OK, {holder, count, redis.call('PTTL', KEYS[1]), tonumber(fence) or 0,
            redis.call('ZCARD', KEYS[3]), mine}}
