-- semaphore_release.lua: give back a lease's permits, and hand the free permits
-- to the first waiters that fit (see _semaphore.lua, sem_promote). Also used by
-- a waiter that gives up, to leave the queue and give back permits handed to
-- it, in the same call.
--
-- KEYS[1]  holders key   sorted set, a member "<token>#<i>" per held permit,
--                        score = expiry (server ms) (see _semaphore.lua)
-- KEYS[2]  permits key   string holding an integer: the permit count
-- KEYS[3]  fence key     string holding an integer: the last fence minted
-- KEYS[4]  waiters key   sorted set of waiters (see _semaphore.lua)
-- KEYS[5]  record key    string "<released>:<ARGV[7]>": set for 120 s by the
--                        clean release of that call (see release_noted in
--                        _common.lua), so that the same call retried after a
--                        lost reply is recognised (and no other call with the
--                        token); unused when ARGV[7] is ""
-- ARGV[1]  token         string; the lease's token
-- ARGV[2]  n             integer >= 1; the lease's permits
-- ARGV[3]  permits       integer >= 1; the caller's permit count, used if none is stored
-- ARGV[4]  member        a waiters member to remove first (a waiter leaving), or ""
-- ARGV[5]  wake prefix   string; waiter w is told by PUBLISH on ARGV[5] .. w
-- ARGV[6]  fence ttl     integer MILLISECONDS the fence key outlives its last use
-- ARGV[7]  op            string; this release call's id (a retry of the call
--                        sends the same), or "" for a release never retried
--
-- Returns  0             OK: released; the permits went to waiters, or are free
--                        (or this very call had been done: a retry, same op).
--          {4, 0}        NOT_OWNED: the token holds no permits (its lease expired,
--                        or it was released); only ARGV[4] was removed (and
--                        expired permits were handed on).
--          {5, key}      WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua
--@include _permits.lua

-- The uncontended path: a release (not a waiter leaving, ARGV[4] = "", and
-- with an op id) of a token that holds its permits, while nobody is queued.
-- Its reply is the one the general path below would give, but for keys it
-- does not touch (the permit count, the fence), whose types it does not check;
-- any other case (or a key it touches holding another type) writes nothing
-- and goes on (`break`) to the general path, which decides. When others hold
-- permits too, their ended leases are dropped, as the general path does. It
-- checks with the ACL guard only the commands it may run after its first
-- write, and is written out with no helper but _permits.lua's for a lease of
-- more than one permit (as semaphore_acquire.lua's: each Lua call costs the
-- server, and a chunk makes every function it defines at every call).
if ARGV[4] == '' and ARGV[7] ~= '' then repeat
  local token, n = ARGV[1], ARGV[2] + 0
  if redis.pcall('ZCARD', KEYS[4]) ~= 0 then break end
  -- the first n + 1 permits, soonest ending first: the token's n alone, or others too
  local first = redis.pcall('ZRANGE', KEYS[1], 0, n, 'WITHSCORES')
  if first.err or #first < 2 * n then break end
  local others, expiry, mine = #first > 2 * n, first[2], token .. '#1'
  if others then
    expiry = redis.call('ZSCORE', KEYS[1], mine)
    if not expiry then break end  -- (not held: NOT_OWNED, or a retry)
  elseif n == 1 then
    if first[1] ~= mine then break end
  else
    local prefix, theirs = token .. '#', false
    for i = 1, #first, 2 do
      if string.sub(first[i], 1, #prefix) ~= prefix then theirs = true end
    end
    if theirs then break end
  end
  local time = redis.call('TIME')
  local ms = time[1] * 1000 + time[2] / 1000
  if expiry + 0 <= ms then break end  -- (ended: its expiry is a whole ms)
  -- The first write is the record's SET: what the rest may run after it is
  -- checked now (as acl_need does).
  local check = redis.acl_check_cmd
  if check then
    if not check('ZREM', KEYS[1]) then return {DENIED, {'command', 'ZREM'}} end
    if others then
      for _, command in ipairs({'ZREMRANGEBYSCORE', 'ZRANGE', 'PEXPIRE'}) do
        if not check(command, KEYS[1]) then return {DENIED, {'command', command}} end
      end
    end
  end
  redis.call('SET', KEYS[5], '1', 'PX', RELEASED_KEEP_MS)
  if n == 1 then redis.call('ZREM', KEYS[1], mine) else sem_drop_lease(token, n) end
  if others then  -- others' leases that ended are dropped; the key expires with the latest left
    local now = math.floor(ms)
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
    local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
    if latest then
      redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.max(1, tonumber(latest) - now)))
    end
  end
  return 0
until true end

--@later
--@include _semaphore.lua

local denied = acl_denied(nil, KEYS[4], ARGV[5])
if denied then return {DENIED, denied} end

local bad = sem_wrong_key()
if bad then return {WRONG_TYPE, bad} end
local s = sem_open(ARGV[3])
sem_prune(s)
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[4], ARGV[4]) end
local held = sem_holds(s, ARGV[1])
if held then
  sem_drop_lease(ARGV[1], tonumber(ARGV[2]))
  if ARGV[4] == '' then release_noted(KEYS[5], ARGV[7]) end
end
sem_promote(s, ARGV[5], tonumber(ARGV[6]), '')
sem_touch(s)
if held then return 0 end
return release_unheld(KEYS[5], ARGV[7])
