-- The corpus of the GPT and LSTM examples: the text files of Debian's
-- `fortunes` package (/usr/share/games/fortunes; *.dat and *.u8 skipped),
-- concatenated in name order, as ../shared/peers/torch_gpt.py reads it.
--
--   local text = dofile("examples/fortunes.lua").read([dir])
local M = {}

M.DIR = "/usr/share/games/fortunes"

function M.files(dir)
  dir = dir or M.DIR
  local names = {}
  local p = io.popen("ls -1 '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
  for name in p:lines() do
    if not name:match("%.dat$") and not name:match("%.u8$") then names[#names + 1] = name end
  end
  p:close()
  table.sort(names) -- byte order, as Python's sorted()
  if #names == 0 then
    error("fortunes: no text files in " .. dir .. " (install Debian's fortunes package: apt-get install fortunes)", 0)
  end
  return names
end

function M.read(dir)
  dir = dir or M.DIR
  local parts = {}
  for i, name in ipairs(M.files(dir)) do
    local path = dir .. "/" .. name
    local f = io.open(path, "rb")
    if f then -- skip what is not a readable regular file
      local ok, s = pcall(f.read, f, "a")
      f:close()
      if ok and s then parts[#parts + 1] = s end
    end
  end
  return table.concat(parts)
end

return M
