package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newInjectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inject",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("inject: not implemented yet") },
	}
}
