// Package peerlog points dubbo-go's and getty's loggers at stderr with a chosen level, so the interop peers keep
// stdout for their own machine-readable lines (READY, JSON summaries). Call Setup once, first thing in main.
package peerlog

import (
	"fmt"

	getty "github.com/apache/dubbo-getty"
	"github.com/dubbogo/gost/log/logger"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Setup replaces dubbo-go's logger (github.com/dubbogo/gost/log/logger, which dubbo-go's init points at stdout)
// and getty's logger (debug level by default) with one zap console logger on stderr at level
// (debug, info, warn, error).
func Setup(level string) error {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("log level %q: %w", level, err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Encoding = "console"
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.OutputPaths = []string{"stderr"}
	cfg.ErrorOutputPaths = []string{"stderr"}
	cfg.Sampling = nil
	cfg.DisableStacktrace = true
	z, err := cfg.Build()
	if err != nil {
		return err
	}
	s := z.Sugar()
	logger.SetLogger(s)
	getty.SetLogger(s)
	return nil
}
