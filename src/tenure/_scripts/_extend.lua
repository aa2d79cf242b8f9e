-- _extend.lua: a lease's renewal, the body of lock_extend.lua (whose header
-- gives its keys, arguments and replies) and of election_renew.lua, which
-- goes on from it. tenure._scripts puts it in place of an include line, after
-- _common.lua and _acl.lua. It returns DENIED, WRONG_TYPE or NOT_OWNED with
-- nothing written, or renews: the lease ARGV[2] ms from now, its lock-delay
-- guard, and the fence key at least as long.
local denied = acl_commands()
if denied then return {DENIED, denied} end

local holder = redis.pcall('GET', KEYS[1])
if wrong(holder) then return {WRONG_TYPE, KEYS[1]} end
if holder ~= ARGV[1] then return {NOT_OWNED, 0} end
local left = redis.call('PTTL', KEYS[1])
if left >= 0 and left < tonumber(ARGV[3]) then return {NOT_OWNED, 1} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
delay_after(KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[4]))
redis.call('PEXPIRE', KEYS[3], math.max(tonumber(ARGV[5]), tonumber(ARGV[2])))
