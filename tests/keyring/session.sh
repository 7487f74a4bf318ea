#!/bin/sh
# tests/keyring/session.sh — inside the private D-Bus session of tests/keyring/run:
# start the keyring daemon (its login keyring unlocked with a throwaway password),
# store the test items, run the specs, stop the daemon (by its own pid).
printf 'throwaway' | gnome-keyring-daemon --unlock --foreground --components=secrets >/dev/null 2>&1 &
daemon=$!
i=0
until dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
    org.freedesktop.DBus.NameHasOwner string:org.freedesktop.secrets 2>/dev/null | grep -q true; do
  i=$((i + 1))
  if [ $i -gt 200 ]; then echo "FAIL keyring/setup: the keyring daemon did not come up"; kill $daemon; exit 1; fi
  sleep 0.05
done
rc=0
printf '%s' 'kr-S3cret "quoted" \ value' | secret-tool store --label=proctor-test service proctor-test account deploy || rc=1
printf '%s' 'second-V4lue' | secret-tool store --label=proctor-test2 service proctor-test account other kind api || rc=1
if [ $rc -ne 0 ]; then echo "FAIL keyring/setup: secret-tool store failed"; kill $daemon; exit 1; fi
LUA_CPATH="build/lua5.4/?.so;;" LUA_PATH="tests/lua/?.lua;;" "$LUA" tests/keyring/spec.lua || rc=1
kill $daemon 2>/dev/null
wait $daemon 2>/dev/null
exit $rc
