-- fair_inspect.lua: read-only snapshot of a fair lock and its queue.
--
-- KEYS[1]  lock key       string; value = the holder's owner token
-- KEYS[2]  fence key      string holding an integer
-- KEYS[3]  waiters key    sorted set, the queue (see fair_acquire.lua)
-- KEYS[4]  deadlines key  sorted set, each member's deadline (server ms)
-- KEYS[5]  quorum key     (optional) sorted set: the candidates of a
--                         RedlockElection of the same name on this master,
--                         counted in `waiting` (not listed)
-- ARGV[1]  limit          integer >= 0: list at most this many waiters
--
-- Returns  {1, {holder, pttl_ms, fence, waiting, member_1, left_1, member_2, left_2, ...}}
--            holder   string, "" when free
--            pttl_ms  integer; -2 when free, -1 when held with no expiry
--            fence    integer, the last fence minted (0 if none is known)
--            waiting  integer, the number of queued waiters whose deadline has
--                     not passed (the others are dropped by the next acquire
--                     or release)
--            member_i the i-th of them in queue order, "<waiter id>|<lease ms>|<token>"
--            left_i   integer MILLISECONDS until member_i's deadline (server time)
--          {5, key}   WRONG_TYPE: key holds a value of another type.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

local denied = acl_commands()
if denied then return {DENIED, denied} end

local holder = redis.pcall('GET', KEYS[1])
if wrong(holder) then return {WRONG_TYPE, KEYS[1]} end
local fence = redis.pcall('GET', KEYS[2])
-- (a value no fence is, such as an integer beyond 2^53, is another type too,
-- as the acquire says)
if wrong(fence) or (fence and not stored_fence(fence)) then return {WRONG_TYPE, KEYS[2]} end
for i = 3, #KEYS do
  if other_type(KEYS[i], 'zset') then return {WRONG_TYPE, KEYS[i]} end
end
local now_ms = math.floor(now_us() / 1000)
local limit = tonumber(ARGV[1])
local out = {holder or '', redis.call('PTTL', KEYS[1]), tonumber(fence) or 0, 0}
local waiting = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local deadline = tonumber(redis.call('ZSCORE', KEYS[4], member))
  if deadline and deadline > now_ms then
    waiting = waiting + 1
    if waiting <= limit then
      out[#out + 1] = member
      out[#out + 1] = deadline - now_ms
    end
  end
end
if KEYS[5] then waiting = waiting + redis.call('ZCARD', KEYS[5]) end
out[4] = waiting
return {OK, out}
