#!/bin/bash
# Smoke test of run-in-vm.sh --systemd (PID 1 is systemd, D-Bus and bluetoothd are its units):
#   IntegrationTests/bluez/vm/run-in-vm.sh --systemd IntegrationTests/systemd/smoke-guest.sh
echo "pid1: $(cat /proc/1/comm)"
systemctl is-system-running
systemctl is-active dbus bluetooth systemd-journald
systemctl --failed --no-legend
journalctl -b --no-pager | tail -n 5
