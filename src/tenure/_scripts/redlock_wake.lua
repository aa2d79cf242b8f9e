-- redlock_wake.lua: after a Redlock release on one master, wake the first live
-- Redlock waiter queued on that master (and only it): "recheck 0" on its wake
-- channel. Members nobody hears (their waiter is gone) are dropped on the way.
-- Nothing is handed over: the woken waiter tries every master itself. A
-- release on N masters thus wakes at most N waiters, whatever the queue's length.
--
-- KEYS[1]  queue key     sorted set, score = server µs at arrival, member =
--                        "<waiter id>|<claim ms>|<token>" (queued by
--                        lock_acquire.lua, given this key as its KEYS[3])
-- ARGV[1]  wake prefix   string; waiter w is told by PUBLISH on ARGV[1] .. w
--
-- Returns  told          OK: told = 1 if a live waiter was told, else 0.
--          {5, key}      WRONG_TYPE: KEYS[1] holds a value of another type.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

local denied = acl_denied(nil, KEYS[1], ARGV[1])
if denied then return {DENIED, denied} end

local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then return 0 end
if t ~= 'zset' then return {WRONG_TYPE, KEYS[1]} end
if wake_head(KEYS[1], ARGV[1], 0, nil) then return 1 end
return 0
