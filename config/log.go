package config

// Log is the process's logging: a zmesh addition to both files (OpenZiti's have no such
// section). The command line (--log-level, --log-format) and the environment
// (ZMESH_LOG_LEVEL, ZMESH_LOG_FORMAT) take precedence over it; a running process takes a
// new Level from the file when it reloads, a new Format only at its next start.
type Log struct {
	Level  string `json:"level" yaml:"level"`
	Format string `json:"format" yaml:"format"`
}

// Log levels and formats the section allows, and its defaults.
const (
	DefaultLogLevel  = "info"
	DefaultLogFormat = "text"
)

// LogLevels returns the levels log.level allows, most verbose first.
func LogLevels() []string { return []string{"debug", "info", "warn", "error"} }

// LogFormats returns the formats log.format allows.
func LogFormats() []string { return []string{"text", "json"} }

// log reads the log section; absent, it is the defaults.
func (r *reader) log(top *mapping) Log {
	m := top.child("log")
	l := Log{
		Level:  m.oneOf("level", DefaultLogLevel, LogLevels()...),
		Format: m.oneOf("format", DefaultLogFormat, LogFormats()...),
	}
	m.finish()
	return l
}
