-- lock_release.lua: compare-and-delete release, then wake the first live waiter.
-- Also used with an empty token to pass on a wake that reached a process which
-- no longer waits.
--
-- KEYS[1]  lock key      string; value = the holder's owner token
-- KEYS[2]  waiters key   sorted set; member = waiter id, score = arrival
-- ARGV[1]  token         string; the releasing lease's owner token, or "" to only
--                        pass the wake on (done only while the lock is free)
-- ARGV[2]  wake prefix   string; waiter w is woken by PUBLISH on ARGV[2] .. w
--
-- Returns  {1, woken}    OK: released (or, with no token, found free); woken = 1
--                        if a live waiter was told, 0 if none waits. A waiter
--                        whose PUBLISH reaches no subscriber is dead and dropped.
--          {2, 0}         BUSY: pass-on mode only; the lock is held, nobody woken.
--          {4, 0}         NOT_OWNED: the lock is not held with this token
--                         (expired, or another owner's); nothing changed.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.

local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' and holder.err then return {5, KEYS[1]} end
local t = redis.call('TYPE', KEYS[2]).ok
if t ~= 'none' and t ~= 'zset' then return {5, KEYS[2]} end

if ARGV[1] == '' then
  if holder then return {2, 0} end
elseif holder ~= ARGV[1] then
  return {4, 0}
else
  redis.call('DEL', KEYS[1])
end

while true do
  local head = redis.call('ZPOPMIN', KEYS[2])
  if #head == 0 then return {1, 0} end
  if redis.call('PUBLISH', ARGV[2] .. head[1], '1') > 0 then return {1, 1} end
end
