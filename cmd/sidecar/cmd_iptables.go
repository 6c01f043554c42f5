package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newIptablesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "iptables",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("iptables: not implemented yet") },
	}
}
