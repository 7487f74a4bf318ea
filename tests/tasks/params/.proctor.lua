-- A project file whose tasks take parameters (tests/nvim/spec_params.lua).
return {
  greet = {
    desc = "write a greeting to a file",
    cmd = {
      "sh",
      "-c",
      'printf "%s|%s|%s" "$GREETING" "$1" "$2" > "$3"',
      "greet",
      "${param:mode}",
      "${param:count}",
      "${param:out}",
    },
    env = { GREETING = "hello ${param:who}" },
    pty = false,
    params = {
      who = { desc = "whom to greet", default = "world" },
      mode = { type = "enum", choices = { "plain", "loud" }, default = "plain" },
      count = { type = "number", default = 3 },
      out = { desc = "the file it writes" },
    },
  },
  -- a shell string: a value is one word, never code; $${param:…} stays literal
  shell = {
    cmd = "echo ${param:msg} $${param:msg}",
    pty = false,
    params = { msg = { default = "a b; touch x" } },
  },
  there = {
    cmd = { "pwd" },
    cwd = "${param:sub}",
    pty = false,
    params = { sub = { default = "sub" } },
  },
  opt = {
    cmd = { "echo", "[${param:extra}]" },
    pty = false,
    params = { extra = { optional = true } },
  },
  plain = { cmd = { "echo", "${param:x}" }, pty = false },
}
