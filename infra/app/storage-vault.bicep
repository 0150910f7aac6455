// The vault account: stream page blobs (the log itself), claim-check blobs, and the
// catalog/index/batches tables. It must be a flat-namespace StorageV2 account: page blobs
// are not supported on accounts with the hierarchical namespace (ADLS Gen2), so this is a
// different account from any data lake that analytics tools use.

@description('Name of the vault storage account (3-24 lowercase letters and digits).')
@minLength(3)
@maxLength(24)
param name string

@description('Azure region of the account.')
param location string

@description('Tags applied to the account.')
param tags object

@description('Reachable only through private endpoints (vnetEnabled): public network access off.')
param privateOnly bool

@description('Redundancy SKU of the vault account (Standard_* only: page blobs need a general-purpose v2 account).')
@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GRS'
  'Standard_RAGRS'
  'Standard_GZRS'
  'Standard_RAGZRS'
])
param skuName string

@description('Blob container that holds one page blob per stream (VAULT_STREAMS_CONTAINER).')
param streamsContainerName string

@description('Blob container for claim-check payloads too large for a queue message (VAULT_CLAIMCHECK_CONTAINER).')
param claimCheckContainerName string

@minValue(1)
@description('Days after its last modification a claim-check blob is deleted by lifecycle management.')
param claimCheckRetentionDays int

@minValue(1)
@maxValue(365)
@description('Days deleted blobs and containers stay recoverable (soft delete).')
param softDeleteRetentionDays int

@description('Tables to create (the app also creates them on start if missing).')
param tableNames array

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: skuName
  }
  properties: {
    accessTier: 'Hot'
    // Page blobs are unsupported when the hierarchical namespace is on.
    isHnsEnabled: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    // Keyless: Entra ID (RBAC) only; account keys and key-signed SAS are refused.
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    publicNetworkAccess: privateOnly ? 'Disabled' : 'Enabled'
    networkAcls: {
      // Isolated: no exception for "trusted Azure services" either; the app comes in
      // through its private endpoints.
      bypass: privateOnly ? 'None' : 'AzureServices'
      defaultAction: privateOnly ? 'Deny' : 'Allow'
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: account
  name: 'default'
  properties: {
    // Soft delete: an accidentally deleted stream blob or container can be undeleted.
    deleteRetentionPolicy: {
      enabled: true
      days: softDeleteRetentionDays
    }
    containerDeleteRetentionPolicy: {
      enabled: true
      days: softDeleteRetentionDays
    }
  }
}

resource streamsContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: streamsContainerName
  properties: {
    publicAccess: 'None'
  }
}

resource claimCheckContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: claimCheckContainerName
  properties: {
    publicAccess: 'None'
  }
}

// A claim-check blob is normally deleted by the writer once its batch is in the log; one
// whose batch was never written (producer crash, poison message) is removed after N days.
resource lifecycle 'Microsoft.Storage/storageAccounts/managementPolicies@2023-05-01' = {
  parent: account
  name: 'default'
  properties: {
    policy: {
      rules: [
        {
          name: 'expire-forgotten-claim-checks'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'blockBlob'
              ]
              prefixMatch: [
                '${claimCheckContainer.name}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: claimCheckRetentionDays
                }
              }
            }
          }
        }
      ]
    }
  }
}

resource tableService 'Microsoft.Storage/storageAccounts/tableServices@2023-05-01' = {
  parent: account
  name: 'default'
}

resource tables 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' = [for tableName in tableNames: {
  parent: tableService
  name: tableName
}]

output name string = account.name
output id string = account.id
output blobEndpoint string = account.properties.primaryEndpoints.blob
output streamsContainerName string = streamsContainer.name
