--- proctor.console.editor — the line editor of pipe consoles.
---
--- A pipe has no terminal to echo and edit what is typed, so the console does:
--- keys typed in Terminal mode come here, are echoed, and a line goes to the
--- process on <CR>. A pure model (no Neovim API): feed() returns the echo and
--- what to do; the console does it.
---
---   <CR>      send the line and "\n"        <BS> ^H   delete a character
---   ^U        delete the line               ^D        send the partial line, close stdin
---   ^C        cancel the execution          escape sequences (arrows...) are ignored
---
--- Requiring this module has no side effects.

---@class proctor.LineEditor
---@field line string the line being typed

---@alias proctor.EditorOp {[1]: "input", [2]: string}|{[1]: "close"}|{[1]: "cancel"}

local E = {}

--- A new editor with an empty line.
---@return proctor.LineEditor
function E.new() return { line = "" } end

--- Feed typed bytes `data`. Returns the text to echo in the terminal and the
--- operations, in order: { "input", text }, { "close" } (stdin), { "cancel" }.
---@param ed proctor.LineEditor
---@param data string
---@return string echo, proctor.EditorOp[] ops
function E.feed(ed, data)
  local echo, ops = {}, {}
  local i = 1
  while i <= #data do
    local ch = data:sub(i, i)
    if ch == "\r" or ch == "\n" then
      ops[#ops + 1] = { "input", ed.line .. "\n" }
      ed.line = ""
      echo[#echo + 1] = "\r\n"
    elseif ch == "\127" or ch == "\b" then
      if #ed.line > 0 then
        -- one character back: skip UTF-8 continuation bytes
        local cut = #ed.line
        while cut > 1 and ed.line:byte(cut) >= 0x80 and ed.line:byte(cut) < 0xC0 do
          cut = cut - 1
        end
        ed.line = ed.line:sub(1, cut - 1)
        echo[#echo + 1] = "\b \b"
      end
    elseif ch == "\4" then
      if ed.line ~= "" then ops[#ops + 1] = { "input", ed.line } end
      ed.line = ""
      ops[#ops + 1] = { "close" }
      echo[#echo + 1] = "^D"
    elseif ch == "\3" then
      echo[#echo + 1] = "^C"
      ops[#ops + 1] = { "cancel" }
    elseif ch == "\21" then
      local chars = select(2, ed.line:gsub("[^\128-\191]", ""))
      echo[#echo + 1] = string.rep("\b \b", chars)
      ed.line = ""
    elseif ch == "\27" then
      local _, e = data:find("^\27%[[0-?]*[ -/]*[@-~]", i)
      if not e then
        _, e = data:find("^\27O.", i)
      end
      i = e or i
    elseif ch:byte() >= 32 or ch == "\t" then
      ed.line = ed.line .. ch
      echo[#echo + 1] = ch
    end
    i = i + 1
  end
  return table.concat(echo), ops
end

return E
