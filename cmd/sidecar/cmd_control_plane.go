package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newControlPlaneCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "control-plane",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("control-plane: not implemented yet") },
	}
}
