-- lock_acquire.lua: take a lock (the SET NX PX protocol) and mint a fencing
-- token, or, when the lock is held, queue the caller so that a release hands
-- the lock straight to it (see lock_release.lua).
--
-- Exact-key mode (KEYS[5] given: a key that foreign clients such as redis-py's
-- Lock or node-redlock may take with SET NX, and release without a word):
--   * while the chain key says "free <window ms>" (a release left the key to
--     foreign clients, see lock_release.lua) every caller is BUSY until it
--     expires; the first queued member is asked to check again every ARGV[8]
--     ms when the window is longer than 2 * ARGV[8], else when it ends;
--   * while the key is free and others are queued, a caller that is not the
--     first queued member does not take it: the first live member is told
--     "recheck 0" (members nobody hears are dropped) and the caller is BUSY, so
--     a releaser that asks again still queues behind the waiters;
--   * a holder that tenure did not grant (not the chain key's token) publishes
--     nothing when it releases: the BUSY reply then asks the first queued
--     member to poll again in a tenth of the time this holder has been seen
--     holding the key (the foreign key), but at least ARGV[8] and at most
--     ARGV[9] ms, and the others in ARGV[9] ms (never beyond the holder's pttl);
--     the foreign key is kept for ARGV[10] ms more, and says that the next
--     window a release leaves is a full one (ARGV[11] ms). A foreign holder
--     seen during a window ends it (the chain key is deleted), so that the
--     first queued member takes the key as soon as that holder lets go.
--
-- KEYS[1]  lock key      string; value = the holder's owner token
-- KEYS[2]  fence key     string holding an integer: the last fence minted for the name
-- KEYS[3]  waiters key   sorted set, score = arrival (server µs), member =
--                        "<waiter id>|<claim ms>|<token>": claim ms = the
--                        lease a release that hands the lock to the member
--                        sets (the waiter's claim window, see _common.lua)
-- KEYS[4]  delay key     string; value = the token of the holder it guards. It
--                        outlives the holder's lease by the lock-delay and a
--                        clean release deletes it, so while it exists without
--                        the lock key a dead holder's lease ended unreleased
--                        and the name stays unavailable.
-- KEYS[5]  chain key     (exact-key mode only) string, see lock_release.lua; a
--                        successful SET NX sets it to "<n> <token>" (PX ARGV[5]),
--                        n = the count it held alone (a tenure release left the
--                        key with nobody queued, moments ago), else 0
-- KEYS[6]  foreign key   (exact-key mode only) string "<server ms> <window ms>
--                        <holder>", PX ARGV[10]: the last holder tenure did not
--                        grant, seen within ARGV[10] ms, since when it was seen
--                        holding, and how long the next window a release leaves
--                        to foreign clients lasts (see lock_release.lua)
-- ARGV[1]  token         string; the acquiring lease's owner token
-- ARGV[2]  owner prefix  string; a holder token that starts with it belongs to the caller
-- ARGV[3]  lease         integer MILLISECONDS, > 0
-- ARGV[4]  member        the caller's waiters member (as KEYS[3]), or "" to not queue
-- ARGV[5]  fence ttl     integer MILLISECONDS the fence key outlives its last use
-- ARGV[6]  lock-delay    integer MILLISECONDS, >= 0; 0 = no lock-delay for this hold
-- ARGV[7]  wake prefix   string; waiter w is told on ARGV[7] .. w (the caller's
--                        own channel is checked before it queues; in exact-key
--                        mode the first queued waiter's too, which may be told)
-- ARGV[8]  head poll     (exact-key mode) integer MILLISECONDS > 0, the shortest
-- ARGV[9]  others' poll  (exact-key mode) integer MILLISECONDS >= ARGV[8]
-- ARGV[10] foreign memory (exact-key mode) integer MILLISECONDS > 0
-- ARGV[11] full window   (exact-key mode) integer MILLISECONDS > 0: the window
--                        after one in which a foreign holder was seen
--
-- Returns  fence          OK: acquired. fence = the larger of the last fence + 1
--                         and the server's TIME in µs, so it increases even
--                         across a restart or a failover.
--                         A call whose token already holds the lock (a retry
--                         after a lost reply, or a hand-off whose message was
--                         lost) gets its own fence again (a new one when the
--                         fence key lost it: gone, or set below 0 by hand),
--                         and its lease (and lock-delay guard) is reset to
--                         ARGV[3] ms from now.
--          -2 - pttl_ms   BUSY (a bare negative number, which no fence is: a
--                         table would cost the server more): another owner
--                         holds it (or its lock-delay runs); pttl_ms = how
--                         long that lasts, -1 when the holder set no expiry.
--                         In exact-key mode, when to try again instead, as
--                         said above.
--          {3, pttl_ms}   OWNED_BY_CALLER: the caller's owner already holds it.
--          {5, key}       WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua

-- The uncontended attempt of a named lock that does not queue, first, and
-- written out here calling no helper: each Lua call costs the server about
-- 0.1-0.4 µs (a C one such as tonumber or math.max too; arithmetic on TIME's
-- strings is the VM's own), and a chunk makes every function it defines at
-- every call, so _common.lua's functions (put above) are defined below, at
-- the `later` line (tenure._scripts.deferred). It reads first (the
-- lock-delay key, the fence key, the clock: a refusal there writes
-- nothing); its first write is the SET NX, after which it runs only SET and,
-- to clear a lock-delay key left by an earlier holder, DEL: that one is
-- checked first then (as acl_need does). Anything else (the lock busy, a
-- lock-delay running, a refusal, a fence key holding no number) goes on
-- (`break`) to the whole script, which says so.
if ARGV[4] == '' and not KEYS[5] then repeat
  local delayed = redis.call('PTTL', KEYS[4])
  local check = redis.acl_check_cmd
  if delayed > 0 or (delayed ~= -2 and check and not check('DEL', KEYS[1])) then break end
  local last = redis.pcall('GET', KEYS[2])
--@include _fence_last.lua
--@include _fence_now.lua
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then break end
  redis.call('SET', KEYS[2], fence, 'PX', ARGV[5])  -- (an integer below 2^53: exact)
  if ARGV[6] + 0 > 0 then
    redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[3] + ARGV[6])
  elseif delayed ~= -2 then
    redis.call('DEL', KEYS[4])
  end
  return fence
until true end

-- The attempt of a named lock that queues and finds the lock held by another
-- owner, written out here too, calling no helper but string.sub and
-- string.match (it only queues: ZADD, then PEXPIRE, as busy() below). It
-- reads the holder, then checks what it runs after its first write
-- (PEXPIRE) and its own wake channel (as acl_need and acl_channels do; Redis
-- 6.2, which can't check them, goes on to the whole script); a waiters key
-- of another type fails its ZADD, its first write, with nothing written.
-- Anything else (the lock free, held by the caller, a refusal) goes on to
-- the whole script, which says so.
if ARGV[4] ~= '' and ARGV[7] and not KEYS[5] then
  local holder = redis.pcall('GET', KEYS[1])
  local check = redis.acl_check_cmd
  if check and holder and not holder.err and holder ~= ARGV[1]
      and string.sub(holder, 1, #ARGV[2]) ~= ARGV[2] and check('PEXPIRE', KEYS[1])
      and check('PUBLISH', ARGV[7] .. string.match(ARGV[4], '^([^|]*)'), 'probe') then
    local pttl = redis.call('PTTL', KEYS[1])
    local now = redis.call('TIME')
    local added = redis.pcall('ZADD', KEYS[3], 'NX', now[1] * 1000000 + now[2], ARGV[4])
    if added ~= 0 and added ~= 1 then  -- (an error reply: a table)
      if not string.find(added.err, 'WRONGTYPE', 1, true) then error(added.err) end
      return {WRONG_TYPE, KEYS[3]}
    end
    redis.call('PEXPIRE', KEYS[3], (pttl > 0 and pttl or 0) + 60000)
    return -2 - pttl  -- BUSY
  end
end

--@later

-- Take the free lock for ARGV[1] (SET NX PX; a key of another type just
-- makes it fail) and mint its fence: the fence; nil when the lock is not
-- free; {WRONG_TYPE, KEYS[2]}, nothing written, when the fence key holds no
-- number. `delayed`: the lock-delay key's PTTL, read before; `chain`: the
-- chain key's value (exact-key mode), or false.
local function take(delayed, chain)
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then return nil end
  local last = redis.pcall('GET', KEYS[2])
  if wrong(last) or (last and not stored_fence(last)) then
    redis.call('DEL', KEYS[1])  -- undo: nothing written
    return {WRONG_TYPE, KEYS[2]}
  end
  local fence = next_fence(last)
  redis.call('SET', KEYS[2], fence, 'PX', ARGV[5])  -- (an integer below 2^53: exact)
  if KEYS[5] then
    -- a count alone: tenure's last hold ended with nobody queued, moments ago
    local n = tonumber(string.match(chain or '', '^(%d+)$')) or 0
    redis.call('SET', KEYS[5], string.format('%d ', n) .. ARGV[1], 'PX', ARGV[5])
  end
  if ARGV[4] ~= '' then redis.call('ZREM', KEYS[3], ARGV[4]) end
  delay_after(KEYS[4], ARGV[1], ARGV[3], tonumber(ARGV[6]), delayed)
  return fence
end

--@include _acl.lua

-- A caller that queues itself must be one a release can tell: its own wake
-- channel (the member's waiter id after the wake prefix 7) is checked too.
local own = nil
if ARGV[4] ~= '' and ARGV[7] then own = ARGV[7] .. string.match(ARGV[4], '^([^|]*)') end

local exact = KEYS[5] ~= nil
local chain = false
if exact then
  chain = redis.pcall('GET', KEYS[5])
  if wrong(chain) then return {WRONG_TYPE, KEYS[5]} end
  -- checked first here, as the exact-key checks below may drop gone waiters
  local last = redis.pcall('GET', KEYS[2])
  if wrong(last) or (last and not stored_fence(last)) then return {WRONG_TYPE, KEYS[2]} end
end
if ARGV[4] ~= '' or exact then
  if other_type(KEYS[3], 'zset') then return {WRONG_TYPE, KEYS[3]} end
end
local delayed = redis.call('PTTL', KEYS[4])
local holder = redis.pcall('GET', KEYS[1])
-- (a refused GET is named by the guard below, which checks GET on every path
-- but one that never gets there: held by another)
local refused = type(holder) == 'table' and holder.err
  and not string.find(holder.err, 'WRONGTYPE', 1, true) and holder.err  -- (its text)
if refused then holder = false elseif wrong(holder) then return {WRONG_TYPE, KEYS[1]} end
-- (everything above only reads: a refusal there writes nothing)

local denied
if exact then
  denied = acl_commands() or acl_channels(own, KEYS[3], ARGV[7] or '')
elseif ARGV[4] ~= '' then
  -- An attempt of a named lock that queues writes first its ZADD (busy), its
  -- SET NX (free) or its ZREM (a retry of its own grant); after that it may
  -- only run ZADD, PEXPIRE, GET, TIME, SET, ZREM and DEL; held by another, it
  -- only queues (ZADD, then PEXPIRE). And a release must be able to tell it
  -- on its own channel. Those are checked now.
  local needed = {'ZADD', 'PEXPIRE', 'GET', 'TIME', 'SET', 'ZREM', 'DEL'}
  if holder and holder ~= ARGV[1] then needed = {'PEXPIRE'} end
  denied = acl_need(needed) or acl_channels(own, nil, ARGV[7] or '')
else
  -- An attempt of a named lock that does not queue writes first with its SET NX
  -- (or, a retry of its own grant, PEXPIRE); after that it may only run GET,
  -- TIME, SET and DEL (the fence, the lock-delay guard): those are checked
  -- now, and nothing else it could never run on this path.
  denied = acl_need({'GET', 'TIME', 'SET', 'DEL'})
end
if denied then return {DENIED, denied} end
if refused then error(refused) end  -- (Redis 6.2: no check names it)

-- Queue the caller (if it asked to be) and reply BUSY (-2 - ms, see the
-- header): try again in pttl ms,
-- or, when head_ms / other_ms are given, in head_ms if the caller is the first
-- queued member, else other_ms.
local function busy(pttl, head_ms, other_ms)
  if ARGV[4] ~= '' then
    redis.call('ZADD', KEYS[3], 'NX', now_us(), ARGV[4])
    redis.call('PEXPIRE', KEYS[3], math.max(pttl, 0) + 60000)
    if head_ms and redis.call('ZRANGE', KEYS[3], 0, 0)[1] == ARGV[4] then
      return -2 - head_ms
    end
  end
  return -2 - (other_ms or pttl)
end

if not holder then
  if delayed > 0 then return busy(delayed) end
  if exact then
    local others = tonumber(ARGV[9])
    local window = string.match(chain or '', '^free ?(%d*)$')
    if window then
      -- a window left to foreign clients: the first waiter checks every ARGV[8]
      -- ms whether a foreign client took the key, which ends the window (below);
      -- a short window it sleeps through
      local left = redis.call('PTTL', KEYS[5])
      if left > 0 then
        local head, poll = left, tonumber(ARGV[8])
        window = tonumber(window)
        if window and window > 2 * poll then head = math.min(left, poll) end
        return busy(left, head, math.max(left, others))
      end
    end
    if wake_head(KEYS[3], ARGV[7], 0, ARGV[4]) then return busy(others) end
  end
  -- free (read above, in this same script): the SET NX takes it
  return take(delayed, chain)
end

if holder == ARGV[1] then
  if ARGV[4] ~= '' then redis.call('ZREM', KEYS[3], ARGV[4]) end
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  delay_after(KEYS[4], ARGV[1], ARGV[3], tonumber(ARGV[6]))
  local last = redis.call('GET', KEYS[2])
  local fence = last and stored_fence(last)
  if last and not fence then return {WRONG_TYPE, KEYS[2]} end
  return kept_fence(KEYS[2], fence, ARGV[5])
end

local pttl = redis.call('PTTL', KEYS[1])
if string.sub(holder, 1, #ARGV[2]) == ARGV[2] then return {OWNED_BY_CALLER, pttl} end
if exact and string.match(chain or '', '^%d+ (.+)$') ~= holder then
  -- a foreign holder: its release wakes nobody
  local seen = redis.pcall('GET', KEYS[6])
  if wrong(seen) then return {WRONG_TYPE, KEYS[6]} end
  local now_ms = math.floor(now_us() / 1000)
  local since, who = string.match(seen or '', '^(%d+) %d+ (.*)$')
  since = tonumber(since)
  if who ~= holder or since > now_ms then since = now_ms end
  -- seen: the next window a release leaves is a full one; a window open now is over
  redis.call('SET', KEYS[6], string.format('%.0f %d ', since, tonumber(ARGV[11])) .. holder,
    'PX', ARGV[10])
  if chain and not string.match(chain, '^%d+ ') then redis.call('DEL', KEYS[5]) end
  local others = tonumber(ARGV[9])
  local head = math.max(tonumber(ARGV[8]), math.min(others, math.floor((now_ms - since) / 10)))
  if pttl >= 0 then return busy(pttl, math.min(pttl, head), math.min(pttl, others)) end
  return busy(pttl, head, others)
end
return busy(pttl)
