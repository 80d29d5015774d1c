module github.com/nctk/nctk

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/cyphar/filepath-securejoin v0.7.0
	github.com/opencontainers/runtime-spec v1.3.0
	github.com/pelletier/go-toml/v2 v2.4.3
	golang.org/x/mod v0.42.0
	golang.org/x/sys v0.49.0
	google.golang.org/grpc v1.85.0
	k8s.io/cri-api v0.37.2
	sigs.k8s.io/yaml v1.6.0
	tags.cncf.io/container-device-interface v1.1.1
	tags.cncf.io/container-device-interface/specs-go v1.1.1
)

require (
	cyphar.com/go-pathrs v0.2.5 // indirect
	github.com/fsnotify/fsnotify v1.7.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
