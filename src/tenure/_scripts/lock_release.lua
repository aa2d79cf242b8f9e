-- lock_release.lua: compare-and-delete release, then hand the lock to the first
-- live waiter: wake it, and reserve the lock for it for a short hand-off window
-- so that nobody else takes the lock first (a release never starves waiters).
-- Also used with an empty token to pass on a wake (or a hand-off) that reached
-- a process which no longer waits.
--
-- KEYS[1]  lock key      string; value = the holder's owner token
-- KEYS[2]  waiters key   sorted set; member = waiter id, score = arrival
-- ARGV[1]  token         string; the releasing lease's owner token, or "" to pass
--                        a wake on (done only while the lock is free or handed
--                        to ARGV[4])
-- ARGV[2]  wake prefix   string; waiter w is woken by PUBLISH on ARGV[2] .. w
-- ARGV[3]  hand-off      integer MILLISECONDS the lock stays reserved for the
--                        woken waiter: "tenure-handoff:<w>" with this PX
-- ARGV[4]  passer        string; with an empty token, the waiter id passing on
--
-- Returns  {1, woken}    OK: released (or passed on); woken = 1 if a live waiter
--                        was handed the lock, 0 if none waits (the lock is free).
--                        A waiter whose PUBLISH reaches no subscriber is dead
--                        and dropped.
--          {2, 0}         BUSY: pass-on mode only; another owner holds the lock.
--          {4, 0}         NOT_OWNED: the lock is not held with this token
--                         (expired, or another owner's); nothing changed.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.

local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' and holder.err then return {5, KEYS[1]} end
local waiting = redis.pcall('ZCARD', KEYS[2])
if type(waiting) == 'table' and waiting.err then return {5, KEYS[2]} end

if ARGV[1] == '' then
  if holder and holder ~= 'tenure-handoff:' .. ARGV[4] then return {2, 0} end
elseif holder ~= ARGV[1] then
  return {4, 0}
end

if holder then redis.call('DEL', KEYS[1]) end
while waiting > 0 do
  local head = redis.call('ZPOPMIN', KEYS[2])
  waiting = waiting - 1
  if redis.call('PUBLISH', ARGV[2] .. head[1], '1') > 0 then
    redis.call('SET', KEYS[1], 'tenure-handoff:' .. head[1], 'PX', ARGV[3])
    return {1, 1}
  end
end
return {1, 0}
