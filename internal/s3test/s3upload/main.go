// Command s3upload uploads a file with aws-sdk-go-v2's own multipart
// uploader (feature/s3/manager), as an agent's program in a guest would:
// credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (a guest's
// placeholders), the endpoint and path-style addressing from flags. The VM
// test of the egress proxy's S3 re-signing builds it statically and runs
// it in a sandbox.
//
//	s3upload -endpoint https://s3.test -bucket b -key k -part-mib 5 FILE
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func main() {
	endpoint := flag.String("endpoint", "", "the S3 endpoint (https://host)")
	bucket := flag.String("bucket", "", "bucket")
	key := flag.String("key", "", "object key")
	partMiB := flag.Int64("part-mib", 5, "part size in MiB (5 at the least)")
	flag.Parse()
	if flag.NArg() != 1 || *endpoint == "" || *bucket == "" || *key == "" {
		fmt.Fprintln(os.Stderr, "usage: s3upload -endpoint URL -bucket B -key K [-part-mib N] FILE")
		os.Exit(2)
	}
	if err := upload(context.Background(), *endpoint, *bucket, *key, *partMiB, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "s3upload:", err)
		os.Exit(1)
	}
}

func upload(ctx context.Context, endpoint, bucket, key string, partMiB int64, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	creds := credentials.NewStaticCredentialsProvider(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), "")
	cl := s3.New(s3.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(endpoint), UsePathStyle: true})
	up := manager.NewUploader(cl, func(u *manager.Uploader) { u.PartSize = partMiB << 20 })
	out, err := up.Upload(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: f})
	if err != nil {
		return err
	}
	fmt.Printf("uploaded %s/%s in %d parts\n", bucket, key, len(out.CompletedParts))
	return nil
}
