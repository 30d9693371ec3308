package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// cpuTime returns the user plus system CPU time that process pid (all its threads) has used
// so far, read from /proc/<pid>/stat. It works on Linux only; elsewhere it returns an error and
// the harness reports CPU as unknown.
func cpuTime(pid int) (time.Duration, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read cpu time: %w", err)
	}
	return parseStat(string(raw))
}

// parseStat takes utime and stime (fields 14 and 15) from a /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may hold spaces, so fields are counted from
// the last ')'.
func parseStat(stat string) (time.Duration, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("parse /proc stat %.40q: no command name", stat)
	}
	fields := strings.Fields(stat[end+1:]) // fields[0] is field 3, the state
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("parse /proc stat %.40q: %d fields", stat, len(fields)+2)
	}
	var ticks int64
	for _, i := range []int{utime, stime} {
		n, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc stat field %d: %w", i+3, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
