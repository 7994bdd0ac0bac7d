-- The Lua blocks of docs/tensor_functions.md run as written, in order, in one chunk after `ddp` and a float32
-- [3, 4] `x` (what the page's blocks assume; later blocks use earlier ones' names), so that the page cannot promise
-- a call that fails. An error names the page and its line.
local U = require "helpers.io_util"

local PAGE = "docs/tensor_functions.md"

local function lua_blocks(text)
  local blocks, line, open = {}, 0, nil
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do
    line = line + 1
    if open then
      if l:match("^```%s*$") then
        blocks[#blocks + 1] = open
        open = nil
      else
        open.lines[#open.lines + 1] = l
      end
    elseif l:match("^```lua") then
      open = { fence = line, lines = {} }
    end
  end
  assert(open == nil, PAGE .. ": a code block opened at line " .. (open and open.fence or 0) .. " is not closed")
  return blocks
end

describe(PAGE, function()
  it("runs every Lua block", function()
    local blocks = lua_blocks(U.read(PAGE))
    assert(#blocks >= 5, PAGE .. ": expected its Lua blocks, found " .. #blocks)
    -- one chunk whose line numbers are the page's: blank lines stand for the prose between the blocks
    local lines, at = { 'local ddp = require "ddplua"; local x = ddp.rand(3, 4)' }, 1
    for _, b in ipairs(blocks) do
      while at < b.fence do lines[#lines + 1] = ""; at = at + 1 end
      for _, l in ipairs(b.lines) do lines[#lines + 1] = l; at = at + 1 end
    end
    local chunk, err = load(table.concat(lines, "\n"), "=" .. PAGE)
    assert(chunk, err)
    local ok, msg = pcall(chunk)
    assert(ok, string.format("%s: a block fails: %s", PAGE, tostring(msg)))
  end)
end)
