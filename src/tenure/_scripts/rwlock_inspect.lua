-- rwlock_inspect.lua: read-only snapshot of a read-write lock (holds whose
-- expiry has passed are left out).
--
-- KEYS[1..4]  lock, holds, fence, waiters keys (see _rwlock.lua)
-- ARGV[1]  owner         string; the owner id asking (its counts are returned), or ""
--
-- Returns  {1, {mode, fence, waiters, writers, mine_r, mine_w, <holds>...}}
--            mode     "write" (a write hold exists), "read", or "" when free
--            fence    integer, the last fence minted (0 if none is known)
--            waiters  integer, the number of queued waiters
--            writers  integer, how many of them wait for the write lock
--            mine_r   integer, ARGV[1]'s read hold count (0 when none)
--            mine_w   integer, ARGV[1]'s write hold count (0 when none)
--          then five items per live hold, latest expiry last:
--            owner id (then ';' and the holder's label, when the hold's id
--            carries one), "r" or "w", count, pttl_ms (the hold's lease left), fence
--          {5, key}   WRONG_TYPE: key holds a value of another type.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _rwlock.lua
--@include _acl.lua

local denied = acl_commands()
if denied then return {DENIED, denied} end

local bad = rw_open(0)
if bad then return {WRONG_TYPE, bad} end
local now = now_ms()
local queued = redis.call('ZRANGE', WAITERS, 0, -1)
local writers = 0
for _, member in ipairs(queued) do
  if string.match(member, '^[^|]*|%d+|w:') then writers = writers + 1 end
end
local out = {'', tonumber(F.last) or 0, #queued, writers, 0, 0}
local live = redis.call('ZRANGEBYSCORE', HOLDS, '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local field = live[i]
  local h = hold(field)
  if h then
    local m, owner = string.sub(field, 1, 1), string.sub(field, 3)
    if m == 'w' then out[1] = 'write' elseif out[1] == '' then out[1] = 'read' end
    if owner == ARGV[1] then
      if m == 'r' then out[5] = h.count else out[6] = h.count end
    end
    local who = owner .. (string.match(h.id, ';.*$') or '')
    for _, v in ipairs({who, m, h.count, tonumber(live[i + 1]) - now, tonumber(h.fence)}) do
      out[#out + 1] = v
    end
  end
end
return {OK, out}
