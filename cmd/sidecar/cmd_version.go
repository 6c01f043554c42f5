package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("version: not implemented yet") },
	}
}
