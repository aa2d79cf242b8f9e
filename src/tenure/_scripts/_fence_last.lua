-- _fence_last.lua: a quick path's reading of the last fence, calling no
-- helper. tenure._scripts puts it in place of an include line inside a
-- `repeat ... until true` block, after `local last = redis.pcall('GET',
-- <the fence key>)`. It sets `n`: the stored fence (stored_fence's rule), or
-- false when none is stored; a reply that is an error (a refusal, another
-- type: it has an err field, which a string has not) or a value that is no
-- fence leaves the block (`break`) for the whole script, which says so.
local n = last and not last.err and tonumber(last)
if last and not (n and n % 1 == 0 and n > -9007199254740992
    and n < 9007199254740992) then break end
