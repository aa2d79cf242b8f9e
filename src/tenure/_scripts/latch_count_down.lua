-- latch_count_down.lua: count a count-down latch down by one. When the count
-- reaches zero the count key is deleted, the opened key gets a new number and
-- that number is published on the latch's channel, waking every waiter.
--
-- KEYS[1]  count key     string holding an integer > 0; absent = zero
-- KEYS[2]  opened key    string holding an integer: the number of the last
--                        opening (it grows with every opening)
-- KEYS[3]  by key        the label of who set the count: deleted with it at
--                        zero, whatever it holds (by the same DEL; never read
--                        here, so counting down costs what it did without it)
-- ARGV[1]  channel       string; the latch's pub/sub channel
-- ARGV[2]  opened ttl    integer MILLISECONDS the opened key outlives its last use
--
-- Returns  {1, left}     OK: the count is now left; 0 = zero (absent). When this
--                        call brought it to zero, the opened number became the
--                        last + 1 (or the server's TIME in µs when none is
--                        stored) and was published on ARGV[1], and the by key
--                        was deleted with the count. At zero already,
--                        nothing is written or published.
--          {5, key}      WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

local current = redis.pcall('GET', KEYS[1])
if wrong(current) or (current and not tonumber(current)) then return {WRONG_TYPE, KEYS[1]} end
local last = redis.pcall('GET', KEYS[2])
if wrong(last) or (last and not stored_fence(last)) then return {WRONG_TYPE, KEYS[2]} end
if not current then return {OK, 0} end
if tonumber(current) > 1 then
  -- (its one write is its last command: nothing needs checking before it)
  return {OK, redis.call('DECR', KEYS[1])}
end
-- Reaching zero: the opened number is minted first; after the first write (the
-- DEL) it runs SET and PUBLISH, and the channel is told.
local opened = string.format('%.0f', next_fence(last))
local denied = acl_need({'SET'}) or acl_channels(ARGV[1])
if denied then return {DENIED, denied} end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('SET', KEYS[2], opened, 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[1], opened)
return {OK, 0}
