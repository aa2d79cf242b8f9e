-- lock_release.lua: compare-and-delete release, then hand the lock straight to
-- the first live waiter: the lock is set to that waiter's token with a lease
-- of the waiter's claim window, a fence is minted for it, and "<fence> <token>"
-- is published on its wake channel; the next waiter is told "recheck <claim
-- ms>" (see _common.lua, hand_off). The waiter holds the lock when the message
-- arrives: no further round trip, and nobody can take the lock in between (no
-- starvation); it extends the claim to its full lease at once.
-- Also used by a waiter that gives up, to leave the queue in the same call.
--
-- Exact-key mode (KEYS[6] given: a key that foreign clients such as redis-py's
-- Lock or node-redlock may poll with SET NX): hand-offs in a row are counted in
-- the chain key, and once ARGV[7] of them were made the release hands nothing
-- on: the key is left free, the chain key says "free <window ms>" for a window
-- (tenure's acquires stay off the key meanwhile, see lock_acquire.lua), and the
-- first live waiter is told "recheck <ms>": when the window ends, or in ARGV[10]
-- ms for a window longer than 2 * ARGV[10] (it then checks whether a foreign
-- client took the key, which ends the window). The window:
--   * ARGV[9] ms when no foreign holder was seen lately (the foreign key is
--     gone): the cost when only tenure uses the key;
--   * the foreign key's window (lock_acquire.lua sets it to the full window
--     when it sees a foreign holder), at least ARGV[8] ms; the foreign key is
--     then set to half of it (at least ARGV[8]) for the next window, unless a
--     foreign holder is seen meanwhile.
-- So tenure's waiters can't keep the key busy for ever: a foreign poller finds
-- it free at least once per chain, and a poller that retries at least once a
-- full window lands in every full window.
--
-- KEYS[1]  lock key      string; value = the holder's owner token
-- KEYS[2]  waiters key   sorted set, score = arrival, member =
--                        "<waiter id>|<claim ms>|<token>" (see lock_acquire.lua)
-- KEYS[3]  fence key     string holding an integer: the last fence minted
-- KEYS[4]  delay key     string: the lock-delay guard (see lock_acquire.lua);
--                        a clean release deletes it
-- KEYS[5]  record key    string "<released>:<ARGV[6]>": set for 120 s by the
--                        clean release of that call (see release_noted in
--                        _common.lua), so that the same call retried after a
--                        lost reply is recognised (and no other call with the
--                        token); unused when ARGV[6] is ""
-- KEYS[6]  chain key     (exact-key mode only) string: "<n> <token>" while a
--                        token that tenure granted holds the key, n = the
--                        tenure holds in a row before it (hand-offs, and holds
--                        taken by an acquire that counted on), PX ARGV[3];
--                        "free <ms>" (PX the window) while
--                        the key is left to foreign clients (ms: the window's
--                        length); "<n>" alone (PX the window a release
--                        at the bound would leave) after a release that left
--                        the key free with nobody queued while a foreign
--                        holder was seen lately, below the chain bound (at
--                        it, "free <ms>" as after a hand-off's window): a
--                        tenure acquire that takes it meanwhile counts on
--                        from n. A clean release
--                        deletes it (and sets it again for a hand-off or a
--                        window).
-- KEYS[7]  foreign key   (exact-key mode only) see lock_acquire.lua; a window
--                        it gave halves its window for the next one
-- ARGV[1]  token         string; the releasing lease's owner token
-- ARGV[2]  wake prefix   string; waiter w is told by PUBLISH on ARGV[2] .. w
-- ARGV[3]  fence ttl     integer MILLISECONDS the fence key outlives its last use
-- ARGV[4]  member        a waiters member to remove first (a waiter leaving), or ""
-- ARGV[5]  lock-delay    integer MILLISECONDS, >= 0, for the waiter handed the lock
-- ARGV[6]  op            string; this release call's id (a retry of the call
--                        sends the same), or "" for a release never retried
-- ARGV[7]  chain bound   (exact-key mode) integer >= 0: the most hand-offs in a row
-- ARGV[8]  free window   (exact-key mode) integer MILLISECONDS > 0: the least
--                        window the key is left free to foreign clients after
--                        the chain bound, when a foreign holder was seen lately
--                        (KEYS[7])
-- ARGV[9]  short window  (exact-key mode) integer MILLISECONDS > 0: the window
--                        when no foreign holder was seen lately
-- ARGV[10] head poll     (exact-key mode) integer MILLISECONDS > 0: when the
--                        first waiter checks a long window first
--
-- Returns  handed        OK: released; handed = 1 if a live waiter now holds the
--                        lock, 0 if nobody waits (the lock is free), if the
--                        exact-key chain bound left it free, or if this
--                        very call had already been done (a retry: same op). A
--                        waiter whose PUBLISH reaches no subscriber is gone: dropped.
--          {4, 0}         NOT_OWNED: the lock is not held with this token
--                         (expired, or another owner's); only ARGV[4] was removed.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua

-- The release of a named lock with nobody queued (ZCARD) and no member to
-- drop (then GET, SET of the record, DEL), first, and written out here with
-- no helper (as lock_acquire.lua's uncontended attempt; release_noted's
-- record): its first write is the record's SET (or, with no record, its
-- DEL); after it, it may only run DEL, which is checked first (as acl_need
-- does). Anything else (waiters, a lock not held with this token, a refusal,
-- a key of another type) goes on to the whole script, which says so.
local waiting = redis.pcall('ZCARD', KEYS[2])
if waiting == 0 and ARGV[4] == '' and not KEYS[6] then
  local check = redis.acl_check_cmd
  if (not check or check('DEL', KEYS[1])) and redis.pcall('GET', KEYS[1]) == ARGV[1] then
    if ARGV[6] ~= '' then redis.call('SET', KEYS[5], '1', 'PX', RELEASED_KEEP_MS) end
    redis.call('DEL', KEYS[1], KEYS[4])
    return 0
  end
end

--@later

local exact = KEYS[6] ~= nil
local handoffs = 0  -- exact-key mode: the hand-offs in a row that led to this hold
local delay = ARGV[5] + 0
local function grant(token, lease, fence)
  redis.call('SET', KEYS[1], token, 'PX', lease)
  redis.call('SET', KEYS[3], fence, 'PX', ARGV[3])
  delay_after(KEYS[4], token, lease, delay)
  if exact then redis.call('SET', KEYS[6], (handoffs + 1) .. ' ' .. token, 'PX', ARGV[3]) end
end

-- The release of a named lock that hands it on (waiters queued, no member to
-- drop), before the ACL guard's helpers are made, on a server that checks
-- commands up front (Redis >= 7.0, Valkey), calling no helper but
-- string.match (as lock_acquire.lua's quick paths). It reads first (the
-- holder, the fence key, the first two waiters, the clock); its first write
-- is the record's SET (or, with no record, its DEL); after it, it runs DEL,
-- ZPOPMIN, SET, PUBLISH to the waiters it tells, and the ZRANGE and TIME it
-- ran already (a command that ran is one the user may run, and a refused
-- TIME goes on to the whole script): the others are checked first (as
-- acl_need and acl_channels do). It hands the lock as hand_off does
-- (_common.lua), its first round written out here (the first two waiters
-- read above: the second is the one told to recheck); a first waiter nobody
-- hears goes on to hand_off itself. The lock key is written over, and so is
-- the lock-delay key when the waiter gets a lock-delay (else it is deleted).
-- Anything else (nobody holding with this token, a refusal, a key of another
-- type, a fence key holding no fence) goes on (`break`) to the whole script,
-- which says so.
local pending = nil  -- the fence key's value, when the first waiter was gone
local check = redis.acl_check_cmd
if check and ARGV[4] == '' and not exact and type(waiting) == 'number' and waiting > 0 then repeat
  if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then break end
  local last = redis.pcall('GET', KEYS[3])
--@include _fence_last.lua
  local heads = redis.call('ZRANGE', KEYS[2], 0, 1)
  local clock = redis.pcall('TIME')  -- (refused: the whole script says so)
  local allowed = clock[1] and check('DEL', KEYS[1]) and check('ZPOPMIN', KEYS[1])
    and check('SET', KEYS[1])
  for i = 1, #heads do
    local w = string.match(heads[i], '^([^|]*)|')
    if allowed and w then allowed = check('PUBLISH', ARGV[2] .. w, 'probe') end
  end
  if not allowed then break end
  if ARGV[6] ~= '' then redis.call('SET', KEYS[5], '1', 'PX', RELEASED_KEEP_MS) end
  -- (the first write)
  if delay <= 0 then redis.call('DEL', KEYS[4]) end
  local head = redis.call('ZPOPMIN', KEYS[2])[1]
  local w, claim, token = string.match(head, '^([^|]*)|(%d+)|(.+)$')
  if w then
    -- the fence (next_fence_at's rule) as digits: from the clock, TIME's two
    -- numbers with the µs padded to six digits
    local fence
    if n and n >= clock[1] * 1000000 + clock[2] then
      fence = string.format('%.0f', n + 1)
    else
      local micros = clock[2]
      if #micros < 6 then micros = string.rep('0', 6 - #micros) .. micros end
      fence = clock[1] .. micros
    end
    if redis.call('PUBLISH', ARGV[2] .. w, fence .. ' ' .. token) > 0 then
      redis.call('SET', KEYS[1], token, 'PX', claim)
      redis.call('SET', KEYS[3], fence, 'PX', ARGV[3])
      if delay > 0 then redis.call('SET', KEYS[4], token, 'PX', claim + delay) end
      -- the next waiter: the second read above (hand_off's recheck)
      local second = heads[2] and string.match(heads[2], '^([^|]*)|')
      if second then redis.call('PUBLISH', ARGV[2] .. second, 'recheck ' .. claim) end
      return 1
    end
  end
  -- that waiter is gone: the lock is freed (and its lock-delay key, when
  -- it was kept above), and handed on below (hand_off)
  if delay <= 0 then redis.call('DEL', KEYS[1]) else redis.call('DEL', KEYS[1], KEYS[4]) end
  pending = last
until true end

--@later

if pending ~= nil then
  if hand_off(KEYS[2], ARGV[2], pending, grant) then return 1 end
  return 0
end

--@include _acl.lua

if wrong(waiting) then return {WRONG_TYPE, KEYS[2]} end
local denied
if KEYS[6] then
  denied = acl_commands() or acl_channels(nil, waiting > 0 and KEYS[2] or nil, ARGV[2])
elseif waiting > 0 or ARGV[4] ~= '' then
  -- A named lock's release with waiters, or a member to drop, writes first
  -- the record's SET, its DEL or the member's ZREM; after that it may only
  -- run EXISTS, ZREM, DEL, ZPOPMIN, TIME, SET and ZRANGE, and PUBLISH to the
  -- first waiters it tells: those are checked now.
  denied = acl_need({'EXISTS', 'ZREM', 'DEL', 'ZPOPMIN', 'TIME', 'SET', 'ZRANGE'})
    or acl_channels(nil, waiting > 0 and KEYS[2] or nil, ARGV[2])
else
  -- A named lock's release with nobody queued and no member to drop: its first
  -- write is the record's SET (or, with no record, its DEL); after it, it may
  -- only run DEL: that is checked now, nothing it could never run on this path.
  denied = acl_need({'DEL'})
end
if denied then return {DENIED, denied} end

local holder = redis.pcall('GET', KEYS[1])
if wrong(holder) then return {WRONG_TYPE, KEYS[1]} end
local chain = false
if exact then
  chain = redis.pcall('GET', KEYS[6])
  if wrong(chain) then return {WRONG_TYPE, KEYS[6]} end
end
local last = false
if waiting > 0 then
  last = redis.pcall('GET', KEYS[3])
  if wrong(last) or (last and not stored_fence(last)) then return {WRONG_TYPE, KEYS[3]} end
end

if holder ~= ARGV[1] then
  if ARGV[4] ~= '' then redis.call('ZREM', KEYS[2], ARGV[4]) end
  return release_unheld(KEYS[5], ARGV[6])
end
release_noted(KEYS[5], ARGV[6])  -- the first write
if ARGV[4] ~= '' then waiting = waiting - redis.call('ZREM', KEYS[2], ARGV[4]) end
redis.call('DEL', KEYS[1], KEYS[4])

if exact then
  local n, t = string.match(chain or '', '^(%d+) (.+)$')
  if t == ARGV[1] then handoffs = tonumber(n) end
  redis.call('DEL', KEYS[6])
end

-- Exact-key mode: how long the key is left to foreign clients (ms), when to
-- tell the first waiter to look again, and the foreign key's fields (or nil):
-- ARGV[9] when no foreign holder was seen lately, else the foreign key's
-- window, at least ARGV[8].
local function foreign_window()
  local seen = redis.pcall('GET', KEYS[7])
  if not seen then return tonumber(ARGV[9]), tonumber(ARGV[9]) end
  local window = tonumber(ARGV[8])
  local since, full, who
  if type(seen) == 'string' then since, full, who = string.match(seen, '^(%d+) (%d+) (.*)$') end
  full = tonumber(full)
  if not (full and full > window) then full = nil end
  window = full or window
  local poll = tonumber(ARGV[10])
  local tell = window
  if poll and window > 2 * poll then tell = poll end
  return window, tell, full and {since, full, who}
end

-- Exact-key mode: leave the key to foreign clients for `window` ms (tenure's
-- acquires stay off it meanwhile; its first waiter, if any, was told when to
-- look again). `seen`: the foreign key's fields, or nil.
local function leave_free(window, seen)
  redis.call('SET', KEYS[6], 'free ' .. string.format('%d', window), 'PX', window)
  local keep = redis.call('PTTL', KEYS[7])
  if seen and keep > 0 then
    -- the next window half as long, unless a foreign holder is seen
    -- meanwhile (lock_acquire.lua then makes it full again)
    local half = math.max(tonumber(ARGV[8]), math.floor(seen[2] / 2))
    redis.call('SET', KEYS[7], string.format('%s %d %s', seen[1], half, seen[3]), 'PX', keep)
  end
  return 0
end

local at_bound = exact and handoffs >= tonumber(ARGV[7])
if waiting > 0 then
  if not at_bound then
    if hand_off(KEYS[2], ARGV[2], last, grant) then return 1 end
  else
    local window, tell, seen = foreign_window()
    if wake_head(KEYS[2], ARGV[2], tell) then return leave_free(window, seen) end
  end
end
if exact and redis.call('EXISTS', KEYS[7]) == 1 then
  -- left free with no tenure waiter while foreign clients are about: the
  -- hold that ends at the chain bound leaves the window all the same (the
  -- next tenure acquire would be one hold too many in a row); before it, a
  -- tenure acquire that takes the key within the window a release at the
  -- bound would leave goes on counting
  if at_bound then
    local window, _, seen = foreign_window()
    return leave_free(window, seen)
  end
  redis.call('SET', KEYS[6], tostring(handoffs + 1), 'PX', (foreign_window()))
end
return 0
