module github.com/stormgate/stormgate/internal/childproc

go 1.26.8
