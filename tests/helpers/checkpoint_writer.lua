-- Saves a large checkpoint to arg[1] over and over, each one stamped with
-- its iteration number, until killed ("begin i" / "end i" lines on stdout
-- bracket each save). checkpoint_spec kills it with -9 at random moments
-- and checks what it leaves behind.
local ddp = require "ddplua"
local path, n = arg[1], math.tointeger(tonumber(arg[2] or "4000000"))
local w = ddp.zeros(n)
local i = 0
while true do
  i = i + 1
  w:fill_(i)
  io.stdout:write("begin ", i, "\n")
  io.stdout:flush()
  ddp.save_checkpoint(path, { model = { w = w, b = ddp.full({ 1000 }, i) }, step = i,
    extra = { tag = "iteration " .. i } })
  io.stdout:write("end ", i, "\n")
  io.stdout:flush()
end
