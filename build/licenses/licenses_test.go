package licenses

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	mitText = `Copyright (c) 2020 A

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software ... The above copyright notice and this permission notice shall be included in
all copies or substantial portions of the Software.`
	bsd2Text = `Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met:
 * Redistributions of source code must retain the above copyright notice ...`
	bsd3Text = bsd2Text + `
 * Neither the name of the copyright holder nor the names of its contributors may be used ...`
	iscText    = `Permission to use, copy, modify, and/or distribute this software for any purpose with or without fee is hereby granted, provided ...`
	apacheHead = `Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in compliance with the License.`
	gplText    = `This program is free software: you can redistribute it and/or modify
it under the terms of the GNU General Public License as published by the Free Software Foundation.`
	mplText  = `Mozilla Public License Version 2.0 ...`
	jsonText = mitText + "\nThe Software shall be used for Good, not Evil."
	bsd4Text = bsd3Text + `
 * All advertising materials mentioning features or use of this software must display ...`
)

// Each license the dependencies use is recognised from its operative sentences, however the file
// wraps them; copyleft and field-of-use licenses are named, never taken for permissive ones.
func TestClassify(t *testing.T) {
	cases := []struct {
		name, text string
		want       []string
	}{
		{"MIT", mitText, []string{"MIT"}},
		{"BSD-2", bsd2Text, []string{"BSD-2-Clause"}},
		{"BSD-3", bsd3Text, []string{"BSD-3-Clause"}},
		{"BSD-3 rewrapped", strings.ReplaceAll(bsd3Text, " ", "\n   "), []string{"BSD-3-Clause"}},
		{"ISC", iscText, []string{"ISC"}},
		{"Apache header", apacheHead, []string{"Apache-2.0"}},
		{"MIT and Apache in one file", mitText + "\n\n" + apacheHead, []string{"Apache-2.0", "MIT"}},
		{"GPL", gplText, []string{"GPL"}},
		{"MIT or GPL", mitText + "\n" + gplText, []string{"GPL", "MIT"}},
		{"MPL", mplText, []string{"MPL"}},
		{"JSON", jsonText, []string{"JSON (\"Good, not Evil\")", "MIT"}},
		{"BSD-4", bsd4Text, []string{"BSD-4-Clause"}},
		{"unknown", "All rights reserved. Do not copy.", []string{}},
	}
	for _, c := range cases {
		if got := Classify(c.text); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// The real Apache-2.0 text, as in this repository's LICENSE.
	b, err := os.ReadFile(filepath.Join("..", "..", "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if got := Classify(string(b)); !slices.Equal(got, []string{"Apache-2.0"}) {
		t.Errorf("LICENSE: %q", got)
	}
}

// A module whose license is missing, unknown or not allowed cannot ship, and says why.
func TestModuleProblem(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func() Module {
		m := Module{Path: "example.com/m", Version: "v1.0.0", Dir: dir}
		if err := m.read(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if p := read().Problem(); !strings.Contains(p, "no LICENSE") {
		t.Errorf("no license file: %q", p)
	}
	write("COPYING", "All rights reserved.")
	if p := read().Problem(); !strings.Contains(p, "not recognised") {
		t.Errorf("unknown license: %q", p)
	}
	write("COPYING", gplText)
	if p := read().Problem(); !strings.Contains(p, "GPL is not compatible") {
		t.Errorf("GPL: %q", p)
	}
	write("COPYING", mitText)
	write("LICENSE-APACHE", apacheHead)
	write("NOTICE.txt", "  Example\nCopyright A  \n")
	m := read()
	if p := m.Problem(); p != "" || !slices.Equal(m.Licenses, []string{"Apache-2.0", "MIT"}) ||
		!slices.Equal(m.LicenseFiles, []string{"COPYING", "LICENSE-APACHE"}) || m.Notice != "Example\nCopyright A" {
		t.Errorf("MIT + Apache with a NOTICE: problem %q, %+v", p, m)
	}
}
